// The JSON credential documents of the container credentials endpoint (ECS,
// EKS Pod Identity) and of instance metadata (EC2):
//
//   {"Code": "Success", "AccessKeyId": "...", "SecretAccessKey": "...",
//    "Token": "...", "Expiration": "2026-12-03T12:00:00Z", ...}
//
// Read with a small, strict reader of one flat object: top-level string
// members only, every other value skipped, escapes decoded, any malformed
// input refused. Never an exception, never unbounded work.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "uploader/s3/sigv4.h"

namespace flightrec::uploader {

// Temporary credentials and when they stop working (Unix seconds, UTC;
// 0 = never, for static keys).
struct ExpiringCredentials {
  Credentials credentials;
  int64_t expires_at = 0;
  void Clear() {
    credentials.Clear();
    expires_at = 0;
  }
};

// The string value of a top-level member; false if absent, not a string, or
// the document is not one well-formed object.
bool JsonStringMember(std::string_view json, std::string_view name, std::string* value);

// Fills *out from a credential document. False with *error (no secret in it:
// names of missing members, the Code) when it is incomplete, reports a Code
// other than "Success", or has an Expiration that is not an ISO 8601 time.
bool ParseCredentialDocument(std::string_view json, ExpiringCredentials* out, std::string* error);

}  // namespace flightrec::uploader
