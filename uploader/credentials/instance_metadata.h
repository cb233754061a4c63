// Instance metadata credentials (EC2 instance roles), IMDSv2 only:
//
//   PUT {imds}/latest/api/token   X-aws-ec2-metadata-token-ttl-seconds: 21600
//   GET {imds}/latest/meta-data/iam/security-credentials/        -> role name
//   GET {imds}/latest/meta-data/iam/security-credentials/{role}  -> JSON document
//   (both GETs with X-aws-ec2-metadata-token: <session token>)
//
// {imds} is AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254
// (http://[fd00:ec2::254] with AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6).
// AWS_EC2_METADATA_DISABLED=true turns the source off: nothing is sent.
// No IMDSv1 fallback: a refused token PUT is a failure. Short bounds (1 s to
// connect, 2 s per request), as the SDKs use: off EC2 the address leads
// nowhere.
#pragma once
#include <string>

#include "uploader/credentials/credential_json.h"
#include "uploader/credentials/credentials.h"
#include "uploader/credentials/http_fetch.h"
#include "uploader/credentials/web_identity.h"  // FetchOutcome

namespace flightrec::uploader {

constexpr int kImdsTokenTtlSeconds = 21600;

// The base URL (no trailing '/').
std::string InstanceMetadataEndpoint(const CredentialEnv& env);

// *session_token_seen receives the IMDS session token (kept out of log lines).
FetchOutcome FetchInstanceMetadataCredentials(const CredentialEnv& env, HttpFetcher* http, ExpiringCredentials* out,
                                              std::string* session_token_seen);

}  // namespace flightrec::uploader
