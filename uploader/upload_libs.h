// The libcurl and libcrypto functions the uploader calls, loaded with dlopen
// the first time S3 upload is set up, not linked into libflightrec.so.
//
// Why: libcurl brings about thirty libraries with it (gnutls, krb5, ldap,
// ssh2, rtmp, ...). Linked, every process started under the preload paid
// their dynamic linking, S3 configured or not: /bin/true went from 1.8 ms
// to ~24 ms of CPU, ~18 ms of it libcurl's tree. Now a process maps them only
// when FLIGHTREC_S3_BUCKET is set.
//
// Loaded on the upload thread (S3Client::GlobalInit), never in the
// constructor or on a program's thread: loading maps files, and a slow
// filesystem must not hold up the program's start.
//
// The libraries are opened RTLD_LOCAL (their symbols never join the host's
// global scope) and never closed. A host that already uses libcurl or
// OpenSSL shares the loaded copies, as it did when they were linked.
#pragma once
#include <curl/curl.h>
#include <openssl/conf.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>

#include <string>

namespace flightrec::uploader {

struct UploadLibs {
  // libcurl (libcurl.so.4)
  decltype(&curl_global_init) global_init;
  decltype(&curl_easy_init) easy_init;
  decltype(&curl_easy_cleanup) easy_cleanup;
  decltype(&curl_easy_reset) easy_reset;
  decltype(&curl_easy_setopt) easy_setopt;
  decltype(&curl_easy_getinfo) easy_getinfo;
  decltype(&curl_easy_strerror) easy_strerror;
  decltype(&curl_slist_append) slist_append;
  decltype(&curl_slist_free_all) slist_free_all;
  decltype(&curl_multi_init) multi_init;
  decltype(&curl_multi_cleanup) multi_cleanup;
  decltype(&curl_multi_add_handle) multi_add_handle;
  decltype(&curl_multi_remove_handle) multi_remove_handle;
  decltype(&curl_multi_perform) multi_perform;
  decltype(&curl_multi_poll) multi_poll;
  decltype(&curl_multi_info_read) multi_info_read;
  // libcrypto (libcrypto.so.3)
  decltype(&OPENSSL_init_crypto) openssl_init_crypto;
  decltype(&EVP_sha256) evp_sha256;
  decltype(&EVP_Digest) evp_digest;
  decltype(&EVP_MD_CTX_new) evp_md_ctx_new;
  decltype(&EVP_MD_CTX_free) evp_md_ctx_free;
  decltype(&EVP_DigestInit_ex) evp_digest_init_ex;
  decltype(&EVP_DigestUpdate) evp_digest_update;
  decltype(&EVP_DigestFinal_ex) evp_digest_final_ex;
  decltype(&HMAC) hmac;
  // The configuration file OpenSSL would load (OPENSSL_CONF, else
  // OPENSSLDIR/openssl.cnf), checked before libcurl initialises OpenSSL
  // (uploader/library_environment.h); freed with CRYPTO_free.
  decltype(&CONF_get1_default_config_file) conf_default_file;
  decltype(&CRYPTO_free) crypto_free;
  // libssl (libssl.so.3, libcurl's own dependency): clears the key-log
  // callback on our TLS contexts (uploader/s3/curl_transfer.h).
  decltype(&SSL_CTX_set_keylog_callback) ssl_ctx_set_keylog_callback;
};

// Opens both libraries and resolves every function, once per process
// (thread-safe). nullptr if a library or a function is missing; *error (if
// given) then says which. Later calls return the same answer.
const UploadLibs* LoadUploadLibs(std::string* error = nullptr);

}  // namespace flightrec::uploader
