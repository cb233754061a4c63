// Container credentials (ECS task roles, EKS Pod Identity), as the AWS SDKs
// fetch them:
//
//   AWS_CONTAINER_CREDENTIALS_RELATIVE_URI  -> http://169.254.170.2{uri}
//   else AWS_CONTAINER_CREDENTIALS_FULL_URI -> that URL, which must be https
//        or name a loopback address (127.0.0.0/8, ::1, localhost) or the
//        ECS/EKS agents' link-local ones (169.254.170.2, 169.254.170.23,
//        fd00:ec2::23): credentials are never sent to an arbitrary host.
//
// GET with "Authorization: <token>" when AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
// (read at every fetch; EKS rotates it) or AWS_CONTAINER_AUTHORIZATION_TOKEN
// is set. The answer is a JSON credential document (credential_json.h).
#pragma once
#include <string>

#include "uploader/credentials/credential_json.h"
#include "uploader/credentials/credentials.h"
#include "uploader/credentials/http_fetch.h"
#include "uploader/credentials/web_identity.h"  // FetchOutcome

namespace flightrec::uploader {

bool ContainerCredentialsConfigured(const CredentialEnv& env);

// The URL to ask, or false with *error when the full URI is not allowed.
bool ContainerCredentialsUrl(const CredentialEnv& env, std::string* url, std::string* error);

// *token_seen receives the authorization token (kept out of log lines).
FetchOutcome FetchContainerCredentials(const CredentialEnv& env, HttpFetcher* http, ExpiringCredentials* out,
                                       std::string* token_seen);

}  // namespace flightrec::uploader
