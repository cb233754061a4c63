// CredentialProvider: the uploader's whole credential chain, as the AWS SDKs
// walk it, and the refreshing of temporary credentials.
//
// Chain (the first source that is configured wins, chosen once at start):
//   1. environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN)
//   2. shared credentials file, then shared config file, profile AWS_PROFILE
//   3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (else the config
//      file profile's web_identity_token_file + role_arn) -> STS (web_identity.h)
//   4. container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / _FULL_URI (container_credentials.h)
//   5. instance metadata, IMDSv2, unless AWS_EC2_METADATA_DISABLED=true (instance_metadata.h)
//
// Sources 3-5 hand out credentials that expire. They are fetched lazily,
// only when there is something to upload, and refreshed ahead of expiry
// (RefreshAt: 5 minutes ahead, or halfway through a shorter lifetime), all
// on the upload thread, never on the service's threads. A failed refresh
// keeps the still-valid credentials while they last; once none are usable
// Get() says kWait and the caller keeps its segments queued. Failed fetches
// back off (1 s doubling to 5 min) so a missing endpoint costs almost nothing.
//
// Every secret the provider sees (keys, session tokens, the web identity and
// container tokens, IMDS session tokens) is remembered for Scrub(), which
// callers apply to every text bound for a log line.
#pragma once
#include <cstdint>
#include <string>

#include "uploader/credentials/credential_json.h"
#include "uploader/credentials/credentials.h"
#include "uploader/credentials/http_fetch.h"
#include "uploader/credentials/secret_scrub.h"

namespace flightrec::uploader {

// When credentials fetched at `fetched_at` (Unix s) that expire at
// `expires_at` should be fetched again: 5 minutes ahead of expiry, or half
// their lifetime ahead when that is shorter; never sooner than 1 s after the
// fetch. INT64_MAX for credentials that never expire (expires_at == 0).
int64_t RefreshAt(int64_t fetched_at, int64_t expires_at);
// Credentials are used for a request only while this many seconds remain.
constexpr int64_t kMinRemainingSeconds = 2;
// Wait after the n-th consecutive failed fetch (n from 1): 1 s doubling, 5 min cap.
uint64_t CredentialRetryNs(unsigned failures);

class CredentialProvider {
 public:
  enum class Status { kReady, kWait, kStopped };

  // region: the region STS is asked in. control: stops fetches at the
  // shutdown deadline and fences libcurl (S3Control).
  CredentialProvider(const CredentialEnv& env, std::string region, S3Control* control);

  // Walks the chain's configuration (reads the static files; no network).
  // kNone with *why when nothing is configured.
  CredentialSource Select(std::string* why);
  CredentialSource source() const { return source_; }
  bool temporary() const;
  // A description for the start-up line ("web identity (...), role arn:...").
  std::string Describe() const;

  // Credentials for a request now. kReady: *out holds them (*changed when
  // they differ from the last kReady); *error is empty, or says why a
  // refresh just failed while the current ones still work. kWait: none
  // usable; *error says why. Errors are scrubbed, one line, and stable for
  // "log once". kStopped: the shutdown deadline ended a fetch. last_chance
  // (exit): ignore the fetch backoff.
  Status Get(bool last_chance, Credentials* out, bool* changed, std::string* error);

  // S3 refused the credentials (expired, revoked, rotated file): fetch or
  // re-read before the next request.
  void Invalidate();

  void Scrub(std::string* text) const { secrets_.Scrub(text); }
  int64_t expires_at() const { return current_.expires_at; }
  unsigned fetches() const { return fetches_; }

 private:
  bool Usable(int64_t now) const;
  bool Fetch(ExpiringCredentials* out, std::string* error, bool* stopped);

  CredentialEnv env_;
  std::string region_;
  HttpFetcher http_;
  CredentialSource source_ = CredentialSource::kNone;
  ExpiringCredentials current_;
  bool have_ = false;
  bool invalidated_ = false;
  bool handed_out_ = false;   // current_ was returned by Get since it changed
  int64_t refresh_at_ = 0;    // Unix s
  uint64_t retry_at_ns_ = 0;  // CLOCK_MONOTONIC: no fetch before this after a failure
  unsigned failures_ = 0;
  unsigned fetches_ = 0;
  std::string last_error_;
  SecretList secrets_;
};

}  // namespace flightrec::uploader
