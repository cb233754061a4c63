// Web identity credentials (EKS service accounts, any OIDC provider): the
// token in AWS_WEB_IDENTITY_TOKEN_FILE is exchanged for temporary keys with
// STS AssumeRoleWithWebIdentity, as the AWS SDKs do.
//
//   POST {sts}/  Content-Type: application/x-www-form-urlencoded
//   Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=...
//   &RoleSessionName=...&WebIdentityToken=...
//
// The request is not signed (the token is the proof). {sts} is
// AWS_ENDPOINT_URL_STS (else AWS_ENDPOINT_URL), else the regional endpoint
// https://sts.{region}.amazonaws.com (".com.cn" in China). The token file is
// read again at every fetch: the platform rotates it.
#pragma once
#include <string>
#include <string_view>

#include "uploader/credentials/credential_json.h"
#include "uploader/credentials/credentials.h"
#include "uploader/credentials/http_fetch.h"

namespace flightrec::uploader {

// True when the environment asks for web identity (token file and role set).
bool WebIdentityConfigured(const CredentialEnv& env);

// The STS base URL (no trailing '/'): the override, else regional.
std::string StsEndpointUrl(const CredentialEnv& env, std::string_view region);

// The form body of the request (values URL-encoded).
std::string AssumeRoleWithWebIdentityBody(std::string_view role_arn, std::string_view session_name,
                                          std::string_view token);

// Parses STS's XML answer. False with *error: STS's <Code> for an error
// response, else what is missing. The error never holds a secret.
bool ParseAssumeRoleWithWebIdentityResponse(std::string_view xml, ExpiringCredentials* out, std::string* error);

// Where a failure came from: worth retrying soon, or not until something changes.
struct FetchOutcome {
  bool ok = false;
  bool stopped = false;  // the shutdown deadline ended it
  std::string error;     // one line, no secrets (callers scrub once more)
};

// Reads the token file and asks STS. *token_seen receives the token so the
// caller can keep it out of every log line.
FetchOutcome FetchWebIdentityCredentials(const CredentialEnv& env, std::string_view region, HttpFetcher* http,
                                         ExpiringCredentials* out, std::string* token_seen);

}  // namespace flightrec::uploader
