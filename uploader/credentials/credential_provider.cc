// The credential chain and the refresh of temporary credentials (see credential_provider.h).
#include "uploader/credentials/credential_provider.h"

#include <string.h>  // explicit_bzero

#include <climits>
#include <ctime>

#include "preload/runtime/clock.h"
#include "uploader/credentials/container_credentials.h"
#include "uploader/credentials/instance_metadata.h"
#include "uploader/credentials/web_identity.h"

namespace flightrec::uploader {

int64_t RefreshAt(int64_t fetched_at, int64_t expires_at) {
  if (expires_at == 0) return INT64_MAX;
  constexpr int64_t kAheadSeconds = 300;  // the SDKs refresh minutes ahead
  const int64_t lifetime = expires_at - fetched_at;
  int64_t ahead = lifetime / 2;
  if (ahead > kAheadSeconds) ahead = kAheadSeconds;
  const int64_t at = expires_at - ahead;
  return at < fetched_at + 1 ? fetched_at + 1 : at;
}

uint64_t CredentialRetryNs(unsigned failures) {
  constexpr uint64_t kSecond = 1000000000ull;
  constexpr uint64_t kCap = 300 * kSecond;
  if (failures == 0) return 0;
  const unsigned shift = failures - 1 > 16 ? 16 : failures - 1;
  const uint64_t wait = kSecond << shift;
  return wait > kCap ? kCap : wait;
}

CredentialProvider::CredentialProvider(const CredentialEnv& env, std::string region, S3Control* control)
    : env_(env), region_(std::move(region)), http_(control) {
  secrets_.Add(env_.secret_access_key);
  secrets_.Add(env_.session_token);
  secrets_.Add(env_.container_token);
}

bool CredentialProvider::temporary() const {
  return source_ == CredentialSource::kWebIdentity || source_ == CredentialSource::kContainer ||
         source_ == CredentialSource::kInstanceMetadata;
}

CredentialSource CredentialProvider::Select(std::string* why) {
  Credentials fixed;
  std::string static_why;
  bool refused = false;
  source_ = LoadCredentials(env_, &fixed, &static_why, &refused);
  if (refused) {  // configured, but unusable: no later source stands in for them
    *why = static_why;
    return source_ = CredentialSource::kNone;
  }
  if (source_ != CredentialSource::kNone) {
    current_.credentials = fixed;
    current_.expires_at = 0;
    secrets_.Add(fixed.secret_access_key);
    secrets_.Add(fixed.session_token);
    fixed.Clear();
    have_ = true;
    refresh_at_ = INT64_MAX;
    return source_;
  }
  ApplyProfileWebIdentity(&env_);  // the profile's web_identity_token_file + role_arn, if the variables are unset
  if (WebIdentityConfigured(env_)) return source_ = CredentialSource::kWebIdentity;
  if (ContainerCredentialsConfigured(env_)) {
    std::string url, url_error;
    if (!ContainerCredentialsUrl(env_, &url, &url_error)) {
      *why = url_error;
      return source_ = CredentialSource::kNone;
    }
    return source_ = CredentialSource::kContainer;
  }
  if (!env_.ec2_metadata_disabled) return source_ = CredentialSource::kInstanceMetadata;
  *why = static_why +
         "; no web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN), no container credentials "
         "(AWS_CONTAINER_CREDENTIALS_*), instance metadata disabled (AWS_EC2_METADATA_DISABLED=true)";
  Scrub(why);
  return source_ = CredentialSource::kNone;
}

std::string CredentialProvider::Describe() const {
  std::string d = CredentialSourceName(source_);
  switch (source_) {
    case CredentialSource::kWebIdentity:
      d += ", role " + env_.role_arn + " via " + StsEndpointUrl(env_, region_);
      break;
    case CredentialSource::kContainer: {
      std::string url, error;
      if (ContainerCredentialsUrl(env_, &url, &error)) d += " " + url.substr(0, url.find('?'));
      break;
    }
    case CredentialSource::kInstanceMetadata: d += " " + InstanceMetadataEndpoint(env_); break;
    default: break;
  }
  if (temporary()) d += "; refreshed ahead of expiry on the upload thread";
  Scrub(&d);
  return d;
}

bool CredentialProvider::Usable(int64_t now) const {
  return have_ && (current_.expires_at == 0 || now + kMinRemainingSeconds < current_.expires_at);
}

bool CredentialProvider::Fetch(ExpiringCredentials* out, std::string* error, bool* stopped) {
  std::string seen;
  FetchOutcome o;
  fetches_++;
  switch (source_) {
    case CredentialSource::kWebIdentity: o = FetchWebIdentityCredentials(env_, region_, &http_, out, &seen); break;
    case CredentialSource::kContainer: o = FetchContainerCredentials(env_, &http_, out, &seen); break;
    case CredentialSource::kInstanceMetadata: o = FetchInstanceMetadataCredentials(env_, &http_, out, &seen); break;
    default: o.error = "no temporary credential source"; break;
  }
  secrets_.Add(seen);  // tokens we sent: never in a log line, even if a server echoes them
  if (!seen.empty()) explicit_bzero(seen.data(), seen.size());
  if (o.ok) {
    secrets_.Add(out->credentials.secret_access_key);
    secrets_.Add(out->credentials.session_token);
    return true;
  }
  *stopped = o.stopped;
  *error = std::string(CredentialSourceName(source_)) + ": " + o.error;
  Scrub(error);
  return false;
}

CredentialProvider::Status CredentialProvider::Get(bool last_chance, Credentials* out, bool* changed,
                                                   std::string* error) {
  *changed = false;
  error->clear();
  const int64_t now = time(nullptr);
  if (!temporary()) {
    if (invalidated_) {  // the shared file may have been rotated: look again
      invalidated_ = false;
      Credentials fresh;
      std::string why;
      bool refused = false;
      const CredentialSource found = LoadCredentials(env_, &fresh, &why, &refused);
      if (refused) *error = why;  // said once; the current keys stay (S3 decides about them)
      if (found != CredentialSource::kNone && (fresh.access_key_id != current_.credentials.access_key_id ||
                                               fresh.secret_access_key != current_.credentials.secret_access_key ||
                                               fresh.session_token != current_.credentials.session_token)) {
        secrets_.Add(fresh.secret_access_key);
        secrets_.Add(fresh.session_token);
        current_.credentials = fresh;
        handed_out_ = false;
      }
      fresh.Clear();
    }
  } else if (!have_ || invalidated_ || now >= refresh_at_) {
    const uint64_t mono = MonotonicNs();
    if (last_chance || mono >= retry_at_ns_) {
      ExpiringCredentials fresh;
      std::string why;
      bool stopped = false;
      if (Fetch(&fresh, &why, &stopped)) {
        current_.Clear();
        current_ = std::move(fresh);
        have_ = true;
        invalidated_ = false;
        handed_out_ = false;
        refresh_at_ = RefreshAt(now, current_.expires_at);
        failures_ = 0;
        retry_at_ns_ = 0;
        last_error_.clear();
      } else {
        if (stopped) return Status::kStopped;
        if (failures_ < 64) failures_++;
        retry_at_ns_ = mono + CredentialRetryNs(failures_);
        last_error_ = why;
        *error = why;  // said now, while the current credentials (if any) still work
      }
    }
  }
  if (!Usable(now) || (invalidated_ && temporary())) {
    *error = last_error_.empty() ? std::string(CredentialSourceName(source_)) + ": credentials expired" : last_error_;
    return Status::kWait;
  }
  *out = current_.credentials;
  *changed = !handed_out_;
  handed_out_ = true;
  return Status::kReady;
}

void CredentialProvider::Invalidate() {
  invalidated_ = true;
  retry_at_ns_ = 0;  // S3 said no: one fetch right away is worth it
}

}  // namespace flightrec::uploader
