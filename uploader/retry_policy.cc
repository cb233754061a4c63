// Classification of S3 outcomes and full-jitter backoff.
#include "uploader/retry_policy.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <ctime>

namespace flightrec::uploader {

Verdict Classify(Transport transport, long status, std::string_view code) {
  switch (transport) {
    case Transport::kAborted: return Verdict::kAborted;
    case Transport::kTransient: return Verdict::kRetry;
    case Transport::kFatal: return Verdict::kFatal;
    case Transport::kOk: break;
  }
  // The code decides first: S3 can put an error in a 200 body
  // (CompleteMultipartUpload) and uses 400 for RequestTimeout.
  if (code == "RequestTimeTooSkewed") return Verdict::kRetrySkew;
  if (code == "SlowDown" || code == "RequestTimeout" || code == "InternalError" || code == "ServiceUnavailable" ||
      code == "Throttling" || code == "ThrottlingException" || code == "RequestLimitExceeded")
    return Verdict::kRetry;
  if (status >= 200 && status < 300) return code.empty() ? Verdict::kSuccess : Verdict::kFatal;
  if (status >= 500 || status == 429) return Verdict::kRetry;
  return Verdict::kFatal;  // other 4xx, 3xx (wrong region), 1xx, 0
}

uint64_t BackoffCeilingNs(unsigned attempt, uint64_t base_ns, uint64_t cap_ns) {
  uint64_t ceiling = base_ns;
  for (unsigned i = 0; i < attempt && ceiling < cap_ns; i++)
    ceiling = ceiling > UINT64_MAX / 2 ? UINT64_MAX : ceiling * 2;
  return ceiling > cap_ns ? cap_ns : ceiling;
}

uint64_t FullJitterBackoffNs(unsigned attempt, uint64_t base_ns, uint64_t cap_ns, uint64_t random) {
  const uint64_t ceiling = BackoffCeilingNs(attempt, base_ns, cap_ns);
  if (ceiling == 0) return 0;
  if (ceiling == UINT64_MAX) return random;
  return random % (ceiling + 1);
}

uint64_t JitterRandom::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Locale-independent on purpose: the host may have called setlocale(), which
// would make strptime's %a/%b expect other month names.
bool ParseHttpDate(std::string_view text, int64_t* unix_seconds) {
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::string s(text);
  struct tm tm;
  memset(&tm, 0, sizeof(tm));
  char mon[4] = {};
  char tz[4] = {};
  int consumed = 0;
  size_t comma = s.find(", ");
  if (comma != std::string::npos &&
      sscanf(s.c_str() + comma + 2, "%2d %3s %4d %2d:%2d:%2d %3s%n", &tm.tm_mday, mon, &tm.tm_year, &tm.tm_hour,
             &tm.tm_min, &tm.tm_sec, tz, &consumed) == 7 &&
      s.size() == comma + 2 + static_cast<size_t>(consumed) && strcmp(tz, "GMT") == 0) {
    tm.tm_mon = -1;
    for (int i = 0; i < 12; i++)
      if (strcmp(mon, kMonths[i]) == 0) tm.tm_mon = i;
    if (tm.tm_mon < 0) return false;
  } else {
    memset(&tm, 0, sizeof(tm));
    consumed = 0;
    if (sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
               &tm.tm_sec, &consumed) != 6)
      return false;
    tm.tm_mon -= 1;
    const char* rest = s.c_str() + consumed;
    if (*rest == '.')
      for (rest++; *rest >= '0' && *rest <= '9'; rest++) {}
    if (strcmp(rest, "Z") != 0) return false;
  }
  tm.tm_year -= 1900;
  if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
      tm.tm_sec > 60)
    return false;
  time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return false;
  *unix_seconds = static_cast<int64_t>(t);
  return true;
}

}  // namespace flightrec::uploader
