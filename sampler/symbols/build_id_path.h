// build_id_path: the names a GNU build-id gives files: its hex digits (the
// debug-file cache names its copies by them) and the separate debug file's
// path, /usr/lib/debug/.build-id/xx/rest.debug (where libdw and gdb look).
// Into the caller's buffer: no allocation.
#pragma once

#include <cstddef>

namespace flightrec::sampler {

// Writes the hex digits of bits[0, len) and a NUL into out; false (out
// holds "") if they do not fit in cap bytes.
inline bool BuildIdHex(const unsigned char* bits, size_t len, char* out, size_t cap) {
  static const char kDigits[] = "0123456789abcdef";
  if (cap == 0) return false;
  if (2 * len + 1 > cap) {
    out[0] = '\0';
    return false;
  }
  for (size_t i = 0; i < len; ++i) {
    out[2 * i] = kDigits[bits[i] >> 4];
    out[2 * i + 1] = kDigits[bits[i] & 15];
  }
  out[2 * len] = '\0';
  return true;
}

// "/usr/lib/debug/.build-id/" + the first byte's digits + "/" + the rest's +
// ".debug" into out; false if the build-id is shorter than 2 bytes or the
// path does not fit in cap bytes.
inline bool BuildIdDebugPath(const unsigned char* bits, size_t len, char* out, size_t cap) {
  static const char kDir[] = "/usr/lib/debug/.build-id/";
  static const char kSuffix[] = ".debug";
  const size_t dir = sizeof(kDir) - 1, suffix = sizeof(kSuffix) - 1;
  if (len < 2 || dir + 2 * len + 1 + suffix + 1 > cap) return false;
  for (size_t i = 0; i < dir; ++i) out[i] = kDir[i];
  char* p = out + dir;
  BuildIdHex(bits, 1, p, 3);
  p[2] = '/';
  BuildIdHex(bits + 1, len - 1, p + 3, cap - dir - 3);
  p += 3 + 2 * (len - 1);
  for (size_t i = 0; i <= suffix; ++i) p[i] = kSuffix[i];  // with its NUL
  return true;
}

}  // namespace flightrec::sampler
