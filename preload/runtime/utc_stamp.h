// UtcStamp: a wall-clock time as the compact UTC stamp in segment names and
// incident tags ("20261203T155207.148Z"): sorts as text, no '-' in it.
//
// Computed from days since the epoch here rather than with gmtime_r: glibc's
// gmtime_r still runs its time-zone set-up the first time (opens
// /etc/localtime, allocates through the program's malloc), work that every
// process under the preload paid at start for a name that is UTC anyway.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace flightrec {

inline std::string UtcStamp(uint64_t realtime_ns) {
  const uint64_t secs = realtime_ns / 1000000000ull;
  const unsigned ms = static_cast<unsigned>((realtime_ns / 1000000ull) % 1000);
  const unsigned sod = static_cast<unsigned>(secs % 86400);
  // Civil date from days since 1970-01-01 (proleptic Gregorian): count in
  // 400-year eras of 146097 days starting 0000-03-01, so that the leap day
  // ends each year.
  const int64_t z = static_cast<int64_t>(secs / 86400) + 719468;
  const int64_t era = z / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);                // [0, 146096]
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;  // [0, 399]
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);                // [0, 365]
  const unsigned mp = (5 * doy + 2) / 153;                                     // March = 0
  const unsigned day = doy - (153 * mp + 2) / 5 + 1;
  const unsigned month = mp < 10 ? mp + 3 : mp - 9;
  const int64_t year = static_cast<int64_t>(yoe) + era * 400 + (month <= 2 ? 1 : 0);
  char out[48];
  snprintf(out, sizeof(out), "%04lld%02u%02uT%02u%02u%02u.%03uZ", static_cast<long long>(year), month, day, sod / 3600,
           sod / 60 % 60, sod % 60, ms);
  return out;
}

}  // namespace flightrec
