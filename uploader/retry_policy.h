// Retry policy for S3 requests: which outcomes are worth retrying, and how
// long to wait (exponential backoff with full jitter, as AWS recommends).
//
//   transient (retry with backoff): connection errors, timeouts, any 5xx,
//     429, and the codes SlowDown, RequestTimeout, InternalError,
//     ServiceUnavailable, Throttling/ThrottlingException, RequestLimitExceeded;
//   clock skew (one immediate re-signed retry with the server's time):
//     RequestTimeTooSkewed;
//   fatal (no retry; logged once per cause): every other 4xx/3xx, TLS
//     certificate failures, malformed configuration.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace flightrec::uploader {

// What the transport (libcurl) said, independent of the HTTP status.
enum class Transport {
  kOk,         // a full HTTP response arrived
  kTransient,  // connect/resolve/send/receive failure or timeout
  kAborted,    // we stopped it (shutdown deadline)
  kFatal,      // will not get better by retrying (bad URL, TLS verification, ...)
};

enum class Verdict { kSuccess, kRetry, kRetrySkew, kFatal, kAborted };

// status: HTTP status (0 if none); error_code: S3 <Code> from the body ("" if none).
Verdict Classify(Transport transport, long status, std::string_view error_code);

// min(cap, base * 2^attempt), without overflow.
uint64_t BackoffCeilingNs(unsigned attempt, uint64_t base_ns, uint64_t cap_ns);

// Full jitter: a uniform draw from [0, min(cap, base * 2^attempt)], attempt
// counted from 0. `random` is any uniformly distributed 64-bit value.
uint64_t FullJitterBackoffNs(unsigned attempt, uint64_t base_ns, uint64_t cap_ns, uint64_t random);

// A small non-cryptographic generator for jitter (splitmix64), seeded per thread.
class JitterRandom {
 public:
  explicit JitterRandom(uint64_t seed) : state_(seed) {}
  uint64_t Next();

 private:
  uint64_t state_;
};

// Parses an RFC 7231 IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") or an ISO
// 8601 UTC time ("2013-05-24T00:00:00Z", optional fraction) into Unix seconds.
bool ParseHttpDate(std::string_view text, int64_t* unix_seconds);

}  // namespace flightrec::uploader
