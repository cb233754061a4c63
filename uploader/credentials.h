// Credentials: where the uploader's AWS keys come from.
//
// Order (as the AWS SDKs do): AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+
// AWS_SESSION_TOKEN) from the environment; else the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials), section
// AWS_PROFILE (default "default").
//
// The environment is snapshotted once (CredentialEnv) at init, while the
// process is single-threaded, so the upload thread never calls getenv()
// against a host that may setenv(). Error texts name variables, files and
// profiles, never a key or token value.
#pragma once
#include <string>
#include <string_view>

#include "uploader/sigv4.h"

namespace flightrec::uploader {

struct CredentialEnv {
  std::string access_key_id;      // AWS_ACCESS_KEY_ID
  std::string secret_access_key;  // AWS_SECRET_ACCESS_KEY
  std::string session_token;      // AWS_SESSION_TOKEN (else legacy AWS_SECURITY_TOKEN)
  std::string profile;            // AWS_PROFILE (else AWS_DEFAULT_PROFILE)
  std::string shared_file;        // AWS_SHARED_CREDENTIALS_FILE
  std::string home;               // HOME
  void Clear();                   // wipes the secrets
};

// Reads the variables above from a NULL-terminated environment (like environ).
CredentialEnv CredentialEnvFrom(const char* const* envp);

enum class CredentialSource { kNone, kEnvironment, kSharedFile };

// Fills *out from the environment snapshot or the shared file. On kNone,
// *error says what was tried (e.g. "AWS_ACCESS_KEY_ID is unset and profile
// 'x' has no aws_access_key_id in /home/u/.aws/credentials").
CredentialSource LoadCredentials(const CredentialEnv& env, Credentials* out, std::string* error);

// Parses an INI-style shared credentials file's text and fills *out from
// section [profile]. Returns false if the section or either key is missing.
bool ParseSharedCredentials(std::string_view text, std::string_view profile, Credentials* out);

const char* CredentialSourceName(CredentialSource source);

}  // namespace flightrec::uploader
