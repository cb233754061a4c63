// What the program's environment would make libcurl and OpenSSL do on the
// upload thread that we must refuse: block it forever, or write our TLS keys
// to a file (issue 38 item 5).
//
// Why here: libcurl's global initialisation (on the upload thread,
// S3Client::GlobalInit) has OpenSSL load its configuration file
// (OPENSSL_CONF, else OPENSSLDIR/openssl.cnf, with its .include files and
// the modules it names), and opens SSLKEYLOGFILE for appending (Debian's
// libcurl 7.88 with OpenSSL 3.0: Curl_tls_keylog_open in ossl_init). A FIFO
// or a device there blocks the opening thread forever while it holds
// libcurl's global-init lock and OpenSSL's run-once; SSLKEYLOGFILE makes
// libcurl create the file and log every TLS secret of ours into it.
//
// Neither can be switched off for our transfers alone: both are process
// state (one libcurl, one OpenSSL per process, shared with a program that
// uses them). OPENSSL_INIT_NO_LOAD_CONFIG would keep the file unread for
// the program too (OpenSSL 3.0 loads it once per process, for libcrypto as
// well), and the environment is the program's. So when the environment asks
// for either, the uploader does not initialise libcurl or OpenSSL at all:
// S3 upload is off for the process with one log line, and the program's own
// use of those libraries is exactly as without us. Segments stay on disk for
// a later run.
//
// The check reads with non-blocking opens and stat(), never a blocking open.
#pragma once
#include <string>

namespace flightrec::uploader {

struct UploadLibs;

// True when the OpenSSL configuration at `path` can be read without
// blocking: it does not exist, or it and every file it includes (.include,
// files or directories; relative ones under include_dir when given, the
// OPENSSL_CONF_INCLUDE variable's value) are regular files, and every module
// it names by absolute path (module =, dynamic_path =) is not a FIFO, socket
// or device. False with *why (paths only) otherwise, also when it cannot
// tell (an include path with variables or quotes, too deep, too many files,
// a file over 1 MiB).
bool OpenSslConfigReadable(const std::string& path, const char* include_dir, std::string* why);

// True when libcurl would open SSLKEYLOGFILE (set and not empty).
bool KeyLogFileRequested(const char* value);

// Both checks against the running process's environment, with the path
// libcrypto itself would read. False with *why when S3 upload must stay off.
bool LibraryEnvironmentSafe(const UploadLibs& libs, std::string* why);

}  // namespace flightrec::uploader
