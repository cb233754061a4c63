// Little-endian fixed-width and LEB128 varint encoding/decoding shared by the
// writer and the reader. Decoding is bounds-checked: a reader walks untrusted
// bytes through ByteCursor, which never reads past its end and caps varints
// at 10 bytes (SPEC.md section 1).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace flightrec::format {

inline constexpr size_t kMaxVarintBytes = 10;

// Appends to any byte container with push_back/insert (MiVector<uint8_t>, std::vector<uint8_t>).
template <class Buf>
inline void PutUvarint(Buf* out, uint64_t v) {
  uint8_t tmp[kMaxVarintBytes];
  size_t n = 0;
  while (v >= 0x80) {
    tmp[n++] = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  tmp[n++] = static_cast<uint8_t>(v);
  out->insert(out->end(), tmp, tmp + n);
}

template <class Buf>
inline void PutBytes(Buf* out, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

template <class Buf>
inline void PutStr(Buf* out, std::string_view s) {
  PutUvarint(out, s.size());
  PutBytes(out, s.data(), s.size());
}

// Little-endian fixed width; `width` in 0..8 bytes (low bytes of v).
template <class Buf>
inline void PutFixed(Buf* out, uint64_t v, size_t width) {
  uint8_t tmp[8];
  for (size_t i = 0; i < width; i++) tmp[i] = static_cast<uint8_t>(v >> (8 * i));
  out->insert(out->end(), tmp, tmp + width);
}

inline void StoreLE32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void StoreLE16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline uint64_t LoadLE(const uint8_t* p, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; i++) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

inline uint64_t ZigZag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
inline int64_t UnZigZag(uint64_t u) { return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1)); }

// Bounds-checked reader over untrusted bytes. Every getter returns false (and
// leaves the output unspecified) instead of reading past the end.
class ByteCursor {
 public:
  ByteCursor(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}

  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* pos() const { return p_; }

  bool Uvarint(uint64_t* out) {
    uint64_t v = 0;
    for (size_t i = 0; i < kMaxVarintBytes; i++) {
      if (p_ == end_) return false;
      uint8_t b = *p_++;
      // The 10th byte may only carry bit 63.
      if (i == kMaxVarintBytes - 1 && b > 1) return false;
      v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if (!(b & 0x80)) {
        *out = v;
        return true;
      }
    }
    return false;
  }
  bool U8(uint8_t* out) {
    if (p_ == end_) return false;
    *out = *p_++;
    return true;
  }
  bool Fixed(uint64_t* out, size_t width) {
    if (remaining() < width) return false;
    *out = LoadLE(p_, width);
    p_ += width;
    return true;
  }
  // A view of the next n bytes (valid while the underlying buffer lives).
  bool Bytes(size_t n, const uint8_t** out) {
    if (remaining() < n) return false;
    *out = p_;
    p_ += n;
    return true;
  }
  bool Str(std::string_view* out) {
    uint64_t n;
    const uint8_t* b;
    if (!Uvarint(&n) || n > remaining() || !Bytes(static_cast<size_t>(n), &b)) return false;
    *out = std::string_view(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
    return true;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace flightrec::format
