// Credential lookup: environment snapshot, then the shared credentials file.
#include "uploader/credentials.h"

#include <string.h>  // explicit_bzero

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload/fds/fd_guard.h"

namespace flightrec::uploader {
namespace {

constexpr size_t kMaxCredentialsFile = 1 << 20;  // a credentials file is tiny; refuse absurd ones

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string LowerCopy(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

void Wipe(std::string* s) {
  if (!s->empty()) explicit_bzero(s->data(), s->size());
  s->clear();
}

// Reads a whole small file; false with *error on failure (errno text).
bool ReadSmallFile(const std::string& path, std::string* text, std::string* error) {
  int fd = OpenTransientFd(path.c_str(), O_RDONLY);  // protected while read (preload/fds/fd_guard.h)
  if (fd < 0) {
    *error = path + ": " + strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) > kMaxCredentialsFile) {
    *error = path + ": not a regular file of at most 1 MiB";
    CloseTransientFd(fd);
    return false;
  }
  text->assign(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text->size()) {
    ssize_t n = read(fd, text->data() + done, text->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  text->resize(done);
  CloseTransientFd(fd);
  return true;
}

}  // namespace

void CredentialEnv::Clear() {
  Wipe(&secret_access_key);
  Wipe(&session_token);
  access_key_id.clear();
}

CredentialEnv CredentialEnvFrom(const char* const* envp) {
  CredentialEnv env;
  std::string legacy_token, default_profile;
  for (const char* const* p = envp; p && *p; p++) {
    std::string_view kv(*p);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "AWS_ACCESS_KEY_ID") env.access_key_id = v;
    else if (k == "AWS_SECRET_ACCESS_KEY") env.secret_access_key = v;
    else if (k == "AWS_SESSION_TOKEN") env.session_token = v;
    else if (k == "AWS_SECURITY_TOKEN") legacy_token = v;
    else if (k == "AWS_PROFILE") env.profile = v;
    else if (k == "AWS_DEFAULT_PROFILE") default_profile = v;
    else if (k == "AWS_SHARED_CREDENTIALS_FILE") env.shared_file = v;
    else if (k == "HOME") env.home = v;
  }
  if (env.session_token.empty()) env.session_token = legacy_token;
  Wipe(&legacy_token);
  if (env.profile.empty()) env.profile = default_profile;
  return env;
}

bool ParseSharedCredentials(std::string_view text, std::string_view profile, Credentials* out) {
  Credentials found;
  bool in_section = false, saw_section = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = Trim(text.substr(pos, nl - pos));
    pos = nl + 1;
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      size_t close_br = line.find(']');
      if (close_br == std::string_view::npos) { in_section = false; continue; }
      in_section = Trim(line.substr(1, close_br - 1)) == profile;
      saw_section |= in_section;
      continue;
    }
    if (!in_section) continue;
    size_t sep = line.find_first_of("=:");
    if (sep == std::string_view::npos) continue;
    std::string key = LowerCopy(Trim(line.substr(0, sep)));
    std::string_view value = Trim(line.substr(sep + 1));
    if (key == "aws_access_key_id") found.access_key_id = value;
    else if (key == "aws_secret_access_key") found.secret_access_key = value;
    else if (key == "aws_session_token") found.session_token = value;
    else if (key == "aws_security_token" && found.session_token.empty()) found.session_token = value;
  }
  if (!saw_section || !found.valid()) {
    found.Clear();
    return false;
  }
  *out = std::move(found);
  return true;
}

CredentialSource LoadCredentials(const CredentialEnv& env, Credentials* out, std::string* error) {
  if (!env.access_key_id.empty() && !env.secret_access_key.empty()) {
    out->access_key_id = env.access_key_id;
    out->secret_access_key = env.secret_access_key;
    out->session_token = env.session_token;
    return CredentialSource::kEnvironment;
  }
  std::string why_env = env.access_key_id.empty() ? "AWS_ACCESS_KEY_ID is unset" : "AWS_SECRET_ACCESS_KEY is unset";

  std::string path = env.shared_file;
  if (path.rfind("~/", 0) == 0 && !env.home.empty()) path = env.home + path.substr(1);
  if (path.empty()) {
    if (env.home.empty()) {
      *error = why_env + " and HOME is unset (no shared credentials file)";
      return CredentialSource::kNone;
    }
    path = env.home + "/.aws/credentials";
  }
  const std::string profile = env.profile.empty() ? "default" : env.profile;
  std::string text, read_error;
  if (!ReadSmallFile(path, &text, &read_error)) {
    *error = why_env + " and the shared credentials file is unreadable (" + read_error + ")";
    return CredentialSource::kNone;
  }
  bool ok = ParseSharedCredentials(text, profile, out);
  Wipe(&text);
  if (!ok) {
    *error = why_env + " and profile '" + profile + "' in " + path +
             " lacks aws_access_key_id/aws_secret_access_key";
    return CredentialSource::kNone;
  }
  return CredentialSource::kSharedFile;
}

const char* CredentialSourceName(CredentialSource source) {
  switch (source) {
    case CredentialSource::kEnvironment: return "environment";
    case CredentialSource::kSharedFile: return "shared credentials file";
    case CredentialSource::kNone: break;
  }
  return "none";
}

}  // namespace flightrec::uploader
