// The OpenSSL configuration and SSLKEYLOGFILE checks made before libcurl is
// initialised on the upload thread (see library_environment.h).
#include "uploader/library_environment.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>

#include <cerrno>
#include <string_view>
#include <vector>

#include "preload/fds/fd_guard.h"
#include "uploader/credentials/credentials.h"
#include "uploader/upload_libs.h"

namespace flightrec::uploader {
namespace {

constexpr int kMaxDepth = 8;              // nested .include levels
constexpr int kMaxFiles = 64;             // files read in all
constexpr off_t kMaxFileBytes = 1 << 20;  // ReadSmallFile's limit

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

const char* KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

bool EndsWithNoCase(std::string_view name, std::string_view suffix) {
  return name.size() > suffix.size() &&
         strncasecmp(name.data() + name.size() - suffix.size(), suffix.data(), suffix.size()) == 0;
}

struct Walk {
  std::string include_dir;  // OPENSSL_CONF_INCLUDE: wins over .pragma includedir
  int files = 0;
  std::string why;

  bool Fail(std::string text) {
    why = std::move(text);
    return false;
  }

  // A path OpenSSL would fopen(..., "r"): absent, unreadable or regular is
  // fine (fopen returns at once); anything else may block it.
  bool File(const std::string& path, int depth) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return true;  // OpenSSL's own open fails too, at once
    if (S_ISDIR(st.st_mode)) return true;           // opened, then its read fails at once
    if (!S_ISREG(st.st_mode)) return Fail(path + " is " + KindOf(st.st_mode));
    if (depth > kMaxDepth || ++files > kMaxFiles)
      return Fail(path + ": more than " + std::to_string(kMaxFiles) + " files or " + std::to_string(kMaxDepth) +
                  " levels of .include");
    if (st.st_size > kMaxFileBytes) return Fail("cannot check " + path + " (over 1 MiB)");
    std::string text, error;
    errno = 0;
    if (!ReadSmallFile(path, &text, &error)) {
      if (errno == ENOENT || errno == EACCES) return true;  // gone, or unreadable for OpenSSL too
      return Fail("cannot check " + error);                 // e.g. no longer a regular file
    }
    return Text(text, depth);
  }

  // An .include target: a file, or a directory whose *.cnf and *.conf files
  // OpenSSL reads in turn.
  bool Include(const std::string& path, int depth) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return File(path, depth);
    const int fd = OpenTransientFd(path.c_str(), O_RDONLY | O_DIRECTORY | O_NONBLOCK);
    DIR* d = fd >= 0 ? fdopendir(fd) : nullptr;
    if (!d) {
      CloseTransientFd(fd);
      return true;  // unreadable for OpenSSL too
    }
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      const std::string_view name(e->d_name);
      if (EndsWithNoCase(name, ".cnf") || EndsWithNoCase(name, ".conf")) names.emplace_back(name);
      if (names.size() > kMaxFiles) break;
    }
    CloseTransientDir(d);
    for (const std::string& name : names)
      if (!File(path + "/" + name, depth + 1)) return false;
    return true;
  }

  // One configuration text: its .include and .pragma includedir directives,
  // and the module paths it names.
  bool Text(std::string_view text, int depth) {
    std::string pragma_dir;
    std::string line;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string_view::npos) nl = text.size();
      line.assign(text.substr(pos, nl - pos));
      pos = nl + 1;
      // A line ending in a backslash continues on the next (conf_def.c).
      while (!line.empty() && line.back() == '\\' && pos < text.size()) {
        line.pop_back();
        nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        line.append(text.substr(pos, nl - pos));
        pos = nl + 1;
      }
      std::string_view l = Trim(line);
      if (const size_t hash = l.find('#'); hash != std::string_view::npos) l = Trim(l.substr(0, hash));
      if (l.empty() || l[0] == '[') continue;
      if (l.rfind(".include", 0) == 0 && l.size() > 8 && (l[8] == ' ' || l[8] == '\t' || l[8] == '=')) {
        std::string_view target = Trim(l.substr(8));
        if (!target.empty() && target[0] == '=') target = Trim(target.substr(1));
        if (target.empty()) continue;
        if (target.find_first_of("$\\\"'") != std::string_view::npos)
          return Fail("cannot check .include " + std::string(target) + " (variables or quoting)");
        std::string resolved(target);
        const std::string& dir = include_dir.empty() ? pragma_dir : include_dir;
        if (resolved[0] != '/' && !dir.empty()) resolved = dir + "/" + resolved;
        if (!Include(resolved, depth + 1)) return false;
        continue;
      }
      if (l.rfind(".pragma", 0) == 0) {
        std::string_view p = Trim(l.substr(7));
        if (!p.empty() && p[0] == '=') p = Trim(p.substr(1));
        if (p.rfind("includedir:", 0) == 0) pragma_dir = std::string(Trim(p.substr(11)));
        continue;
      }
      const size_t eq = l.find('=');
      if (eq == std::string_view::npos) continue;
      const std::string_view key = Trim(l.substr(0, eq));
      const std::string_view value = Trim(l.substr(eq + 1));
      if ((key == "module" || key == "dynamic_path") && !value.empty() && value[0] == '/') {
        // A provider or engine OpenSSL dlopens: the loader's open blocks on a FIFO too.
        struct stat st;
        const std::string path(value);
        if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
          return Fail(std::string(key) + " " + path + " is " + KindOf(st.st_mode));
      }
    }
    return true;
  }
};

}  // namespace

bool OpenSslConfigReadable(const std::string& path, const char* include_dir, std::string* why) {
  Walk walk;
  if (include_dir) walk.include_dir = include_dir;
  if (walk.File(path, 0)) return true;
  *why = walk.why;
  return false;
}

bool KeyLogFileRequested(const char* value) { return value != nullptr && value[0] != '\0'; }

bool LibraryEnvironmentSafe(const UploadLibs& libs, std::string* why) {
  // The variable libcurl reads (curl_getenv: getenv, empty = unset). Only
  // its presence decides; the value is never used or logged.
  if (KeyLogFileRequested(getenv("SSLKEYLOGFILE"))) {
    *why = "SSLKEYLOGFILE is set, and libcurl would write the TLS keys of our uploads to it";
    return false;
  }
  // The same lookup OpenSSL makes (OPENSSL_CONF unless setuid, else OPENSSLDIR/openssl.cnf).
  char* conf = libs.conf_default_file();
  if (!conf) return true;  // no memory: OpenSSL would find none either, and load nothing
  const std::string path(conf);
  libs.crypto_free(conf, __FILE__, __LINE__);
  std::string not_readable;
  if (!OpenSslConfigReadable(path, secure_getenv("OPENSSL_CONF_INCLUDE"), &not_readable)) {
    *why = "OpenSSL's configuration could block its reader: " + not_readable;
    return false;
  }
  return true;
}

}  // namespace flightrec::uploader
