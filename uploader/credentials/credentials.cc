// Credential lookup: environment snapshot, then the shared credentials and config files.
#include "uploader/credentials/credentials.h"

#include <string.h>  // explicit_bzero

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload/fds/fd_guard.h"
#include "uploader/s3/header_text.h"

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

}  // namespace

bool ReadSmallFile(const std::string& path, std::string* text, std::string* error) {
  // Protected while read (preload/fds/fd_guard.h). Non-blocking: opening a
  // FIFO for reading would wait for a writer, forever; fstat then refuses
  // anything but a regular file.
  int fd = OpenTransientFd(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY);
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

void CredentialEnv::Clear() {
  Wipe(&secret_access_key);
  Wipe(&session_token);
  Wipe(&container_token);
  access_key_id.clear();
}

CredentialEnv CredentialEnvFrom(const char* const* envp) {
  CredentialEnv env;
  std::string legacy_token, default_profile, default_region, endpoint_url;
  // Each variable the SDKs' default chain reads, and where it goes.
  const struct {
    std::string_view name;
    std::string* to;
  } kVars[] = {
      {"AWS_ACCESS_KEY_ID", &env.access_key_id},
      {"AWS_SECRET_ACCESS_KEY", &env.secret_access_key},
      {"AWS_SESSION_TOKEN", &env.session_token},
      {"AWS_SECURITY_TOKEN", &legacy_token},
      {"AWS_PROFILE", &env.profile},
      {"AWS_DEFAULT_PROFILE", &default_profile},
      {"AWS_SHARED_CREDENTIALS_FILE", &env.shared_file},
      {"AWS_CONFIG_FILE", &env.config_file},
      {"HOME", &env.home},
      {"AWS_WEB_IDENTITY_TOKEN_FILE", &env.web_identity_token_file},
      {"AWS_ROLE_ARN", &env.role_arn},
      {"AWS_ROLE_SESSION_NAME", &env.role_session_name},
      {"AWS_ENDPOINT_URL_STS", &env.sts_endpoint},
      {"AWS_ENDPOINT_URL", &endpoint_url},
      {"AWS_REGION", &env.region},
      {"AWS_DEFAULT_REGION", &default_region},
      {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", &env.container_relative_uri},
      {"AWS_CONTAINER_CREDENTIALS_FULL_URI", &env.container_full_uri},
      {"AWS_CONTAINER_AUTHORIZATION_TOKEN", &env.container_token},
      {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", &env.container_token_file},
      {"AWS_EC2_METADATA_SERVICE_ENDPOINT", &env.ec2_metadata_endpoint},
      {"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", &env.ec2_metadata_mode},
  };
  for (const char* const* p = envp; p && *p; p++) {
    std::string_view kv(*p);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "AWS_EC2_METADATA_DISABLED") {
      env.ec2_metadata_disabled = LowerCopy(Trim(v)) == "true";
      continue;
    }
    for (const auto& var : kVars) {
      if (k == var.name) {
        *var.to = v;
        break;
      }
    }
  }
  if (env.sts_endpoint.empty()) env.sts_endpoint = endpoint_url;
  if (env.region.empty()) env.region = default_region;
  if (env.session_token.empty()) env.session_token = legacy_token;
  Wipe(&legacy_token);
  if (env.profile.empty()) env.profile = default_profile;
  return env;
}

std::string ConfigFileSection(std::string_view profile) {
  return profile == "default" ? std::string("default") : "profile " + std::string(profile);
}

bool IniValue(std::string_view text, std::string_view section, std::string_view key, std::string* value) {
  bool in_section = false, found = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = Trim(text.substr(pos, nl - pos));
    pos = nl + 1;
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      const size_t close_br = line.find(']');
      in_section = close_br != std::string_view::npos && Trim(line.substr(1, close_br - 1)) == section;
      continue;
    }
    const size_t sep = line.find_first_of("=:");
    if (!in_section || sep == std::string_view::npos || LowerCopy(Trim(line.substr(0, sep))) != key) continue;
    *value = Trim(line.substr(sep + 1));  // the last one wins, as in the SDKs' parsers
    found = true;
  }
  return found;
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
      if (close_br == std::string_view::npos) {
        in_section = false;
        continue;
      }
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

namespace {

// One INI file: "" on success, else why it gave nothing (no secret in it);
// *refused when it gave keys with a control character.
std::string TryFile(const std::string& path, const std::string& section, Credentials* out, bool* refused) {
  std::string text, read_error;
  if (!ReadSmallFile(path, &text, &read_error)) return read_error;
  bool ok = ParseSharedCredentials(text, section, out);
  if (!ok && section == "default") ok = ParseSharedCredentials(text, "profile default", out);
  Wipe(&text);
  if (!ok) return "[" + section + "] in " + path + " lacks aws_access_key_id/aws_secret_access_key";
  if (const char* bad = CredentialFieldWithControlChar(*out)) {
    out->Clear();
    *refused = true;
    return "refused: the " + std::string(bad) + " of [" + section + "] in " + path + " holds a control character";
  }
  return std::string();
}

std::string HomePath(const CredentialEnv& env, const std::string& set, const char* fallback) {
  std::string path = set;
  if (path.rfind("~/", 0) == 0 && !env.home.empty()) path = env.home + path.substr(1);
  if (path.empty() && !env.home.empty()) path = env.home + fallback;
  return path;
}

}  // namespace

void ApplyProfileWebIdentity(CredentialEnv* env) {
  if (!env->web_identity_token_file.empty() && !env->role_arn.empty()) return;  // the variables win
  const std::string path = HomePath(*env, env->config_file, "/.aws/config");
  std::string text, read_error;
  if (path.empty() || !ReadSmallFile(path, &text, &read_error)) return;
  const std::string section = ConfigFileSection(env->profile.empty() ? "default" : env->profile);
  std::string token_file, role_arn, session_name;
  if (IniValue(text, section, "web_identity_token_file", &token_file) &&
      IniValue(text, section, "role_arn", &role_arn) && !token_file.empty() && !role_arn.empty()) {
    env->web_identity_token_file = token_file;
    env->role_arn = role_arn;
    if (IniValue(text, section, "role_session_name", &session_name) && env->role_session_name.empty())
      env->role_session_name = session_name;
  }
  Wipe(&text);
}

CredentialSource LoadCredentials(const CredentialEnv& env, Credentials* out, std::string* error, bool* refused) {
  bool refused_here = false;
  if (!refused) refused = &refused_here;
  *refused = false;
  if (!env.access_key_id.empty() && !env.secret_access_key.empty()) {
    const char* bad = HasControlChar(env.access_key_id)       ? "AWS_ACCESS_KEY_ID"
                      : HasControlChar(env.secret_access_key) ? "AWS_SECRET_ACCESS_KEY"
                      : HasControlChar(env.session_token)     ? "AWS_SESSION_TOKEN (or AWS_SECURITY_TOKEN)"
                                                              : nullptr;
    if (bad) {  // header text (uploader/s3/header_text.h): never sent
      *refused = true;
      *error = std::string("refused: ") + bad + " holds a control character";
      return CredentialSource::kNone;
    }
    out->access_key_id = env.access_key_id;
    out->secret_access_key = env.secret_access_key;
    out->session_token = env.session_token;
    return CredentialSource::kEnvironment;
  }
  std::string why = env.access_key_id.empty() ? "AWS_ACCESS_KEY_ID is unset" : "AWS_SECRET_ACCESS_KEY is unset";
  const std::string profile = env.profile.empty() ? "default" : env.profile;
  const std::string credentials_path = HomePath(env, env.shared_file, "/.aws/credentials");
  const std::string config_path = HomePath(env, env.config_file, "/.aws/config");
  if (credentials_path.empty() && config_path.empty()) {
    *error = why + " and HOME is unset (no shared credentials or config file)";
    return CredentialSource::kNone;
  }
  if (!credentials_path.empty()) {
    const std::string miss = TryFile(credentials_path, profile, out, refused);
    if (miss.empty()) return CredentialSource::kSharedFile;
    if (*refused) {
      *error = miss;
      return CredentialSource::kNone;
    }
    why += "; " + miss;
  }
  if (!config_path.empty()) {
    const std::string miss = TryFile(config_path, ConfigFileSection(profile), out, refused);
    if (miss.empty()) return CredentialSource::kConfigFile;
    if (*refused) {
      *error = miss;
      return CredentialSource::kNone;
    }
    why += "; " + miss;
  }
  *error = why;
  return CredentialSource::kNone;
}

const char* CredentialSourceName(CredentialSource source) {
  switch (source) {
    case CredentialSource::kEnvironment: return "environment";
    case CredentialSource::kSharedFile: return "shared credentials file";
    case CredentialSource::kConfigFile: return "shared config file";
    case CredentialSource::kWebIdentity: return "web identity (STS AssumeRoleWithWebIdentity)";
    case CredentialSource::kContainer: return "container credentials endpoint";
    case CredentialSource::kInstanceMetadata: return "instance metadata (IMDSv2)";
    case CredentialSource::kNone: break;
  }
  return "none";
}

}  // namespace flightrec::uploader
