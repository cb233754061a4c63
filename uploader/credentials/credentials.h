// Credentials: the AWS_* environment snapshot, and the static sources of
// keys (the first two links of the chain; uploader/credentials/credential_provider.h
// owns the whole chain and the temporary sources).
//
// Static order (as the AWS SDKs do): AWS_ACCESS_KEY_ID +
// AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN) from the environment; else the
// shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default
// ~/.aws/credentials), section AWS_PROFILE (default "default"); else the
// shared config file (AWS_CONFIG_FILE, default ~/.aws/config), section
// "[profile NAME]" ("[default]" for the default profile). The config
// file's profile may also name a web identity (ApplyProfileWebIdentity).
//
// The environment is snapshotted once (CredentialEnv) at init, while the
// process is single-threaded, so the credential chain never calls getenv()
// against a host that may setenv() (libcurl and OpenSSL read their own
// variables on the upload thread: uploader/library_environment.h). Error
// texts name variables, files and profiles, never a key or token value.
// Keys holding a control character are refused (uploader/s3/header_text.h).
#pragma once
#include <string>
#include <string_view>

#include "uploader/s3/sigv4.h"

namespace flightrec::uploader {

struct CredentialEnv {
  std::string access_key_id;      // AWS_ACCESS_KEY_ID
  std::string secret_access_key;  // AWS_SECRET_ACCESS_KEY
  std::string session_token;      // AWS_SESSION_TOKEN (else legacy AWS_SECURITY_TOKEN)
  std::string profile;            // AWS_PROFILE (else AWS_DEFAULT_PROFILE)
  std::string shared_file;        // AWS_SHARED_CREDENTIALS_FILE
  std::string config_file;        // AWS_CONFIG_FILE
  std::string home;               // HOME
  // Web identity (EKS service accounts, any OIDC): STS AssumeRoleWithWebIdentity.
  std::string web_identity_token_file;  // AWS_WEB_IDENTITY_TOKEN_FILE
  std::string role_arn;                 // AWS_ROLE_ARN
  std::string role_session_name;        // AWS_ROLE_SESSION_NAME
  std::string sts_endpoint;             // AWS_ENDPOINT_URL_STS (else AWS_ENDPOINT_URL)
  std::string region;                   // AWS_REGION (else AWS_DEFAULT_REGION), for STS
  // Container credentials (ECS task roles, EKS Pod Identity).
  std::string container_relative_uri;  // AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
  std::string container_full_uri;      // AWS_CONTAINER_CREDENTIALS_FULL_URI
  std::string container_token;         // AWS_CONTAINER_AUTHORIZATION_TOKEN (secret)
  std::string container_token_file;    // AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
  // Instance metadata (EC2 instance roles), IMDSv2.
  bool ec2_metadata_disabled = false;  // AWS_EC2_METADATA_DISABLED=true
  std::string ec2_metadata_endpoint;   // AWS_EC2_METADATA_SERVICE_ENDPOINT
  std::string ec2_metadata_mode;       // AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE (IPv4, IPv6)
  void Clear();                        // wipes the secrets
};

// Reads the variables above from a NULL-terminated environment (like environ).
CredentialEnv CredentialEnvFrom(const char* const* envp);

enum class CredentialSource {
  kNone,
  kEnvironment,
  kSharedFile,
  kConfigFile,
  kWebIdentity,
  kContainer,
  kInstanceMetadata
};

// Fills *out from the environment snapshot, the shared credentials file or
// the shared config file. On kNone, *error says what was tried (e.g.
// "AWS_ACCESS_KEY_ID is unset; profile 'x' has no keys in
// /home/u/.aws/credentials (...)"). Keys found with a control character in
// any field (uploader/s3/header_text.h) are refused: kNone, *refused set,
// and *error names the variable or the file and the field, never a value;
// the chain stops there (no later source is tried in their place).
CredentialSource LoadCredentials(const CredentialEnv& env, Credentials* out, std::string* error,
                                 bool* refused = nullptr);

// Parses an INI-style shared credentials file's text and fills *out from
// section [section]. Returns false if the section or either key is missing.
bool ParseSharedCredentials(std::string_view text, std::string_view section, Credentials* out);
// The config file's section for a profile: "default" or "profile NAME".
std::string ConfigFileSection(std::string_view profile);
// The value of `key` (lowercase) in [section] of an INI text; the last one wins.
bool IniValue(std::string_view text, std::string_view section, std::string_view key, std::string* value);
// Web identity from the shared config file's profile (web_identity_token_file
// and role_arn, optionally role_session_name), filled into *env unless
// AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN are both set (they win, as in
// the SDKs).
void ApplyProfileWebIdentity(CredentialEnv* env);

// Reads a whole small regular file (at most 1 MiB) through a protected
// descriptor (preload/fds/fd_guard.h); false with *error (path and errno text).
bool ReadSmallFile(const std::string& path, std::string* text, std::string* error);

const char* CredentialSourceName(CredentialSource source);

}  // namespace flightrec::uploader
