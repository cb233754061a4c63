// Column encoders for EVENTS blocks; see column_encoder.h and SPEC.md 5.4.
#include "format/column_encoder.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "format/varint.h"

namespace flightrec::format {
namespace {

static_assert(std::endian::native == std::endian::little, "memcpy of the low bytes assumes little-endian");

// Appends n values at width w (the low w bytes of value_of(i), little-endian).
// A constant width per loop: a variable-length memcpy would be a libc call
// per value, and this is the writer's inner loop (socket.op columns are
// mostly 1 byte wide).
template <unsigned W, typename ValueOf>
void WriteFixedOf(size_t n, uint8_t* p, ValueOf value_of) {
  for (size_t i = 0; i < n; i++, p += W) {
    const uint64_t x = value_of(i);
    if constexpr (W == 1) {
      *p = static_cast<uint8_t>(x);
    } else {
      std::memcpy(p, &x, W);  // little-endian host: the low W bytes come first
    }
  }
}

// Grows out by n * w bytes and calls write(p, integral_constant<W>) on them
// with w as a compile-time constant (1, 2, 4 or 8; nothing for 0).
template <typename Write>
void PutWidth(size_t n, unsigned w, ByteBuf* out, Write write) {
  if (w == 0) return;
  const size_t at = out->size();
  out->resize(at + n * w);
  uint8_t* p = out->data() + at;
  switch (w) {
    case 1: write(p, std::integral_constant<unsigned, 1>{}); break;
    case 2: write(p, std::integral_constant<unsigned, 2>{}); break;
    case 4: write(p, std::integral_constant<unsigned, 4>{}); break;
    default: write(p, std::integral_constant<unsigned, 8>{}); break;
  }
}

template <typename ValueOf>
void PutFixedOf(size_t n, unsigned w, ByteBuf* out, ValueOf value_of) {
  PutWidth(n, w, out, [&](uint8_t* p, auto W) { WriteFixedOf<W>(n, p, value_of); });
}

void PutFixedArray(const uint64_t* v, size_t n, unsigned w, ByteBuf* out) {
  PutFixedOf(n, w, out, [v](size_t i) { return v[i]; });
}

uint64_t MaxOf(const uint64_t* v, size_t n) {
  uint64_t m = 0;
  for (size_t i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

}  // namespace

unsigned WidthFor(uint64_t max) {
  if (max == 0) return 0;
  if (max <= 0xff) return 1;
  if (max <= 0xffff) return 2;
  if (max <= 0xffffffffu) return 4;
  return 8;
}

namespace {

// The unpacked columns once their width is known (the width of their widest
// stored value): EncodePackedColumn knows it already when it falls back to them.
void PlainColumnOfWidth(const uint64_t* v, size_t n, unsigned w, ByteBuf* out) {
  out->push_back(ColumnEncoding(ColumnScheme::kPlain, w));
  PutFixedArray(v, n, w, out);
}

void ZigZagColumnOfWidth(const uint64_t* v, size_t n, unsigned w, ByteBuf* out) {
  out->push_back(ColumnEncoding(ColumnScheme::kZigZag, w));
  PutFixedOf(n, w, out, [v](size_t i) { return ZigZag(static_cast<int64_t>(v[i])); });
}

void DeltaColumnOfWidth(const uint64_t* v, size_t n, unsigned w, ByteBuf* out) {
  const uint64_t base = n ? v[0] : 0;
  out->push_back(ColumnEncoding(ColumnScheme::kDelta, w));
  PutFixed(out, base, 8);
  if (w == 0) return;
  // The first delta is 0 (from the base); no per-value test for it.
  PutWidth(n, w, out, [&](uint8_t* p, auto W) {
    WriteFixedOf<W>(1, p, [](size_t) { return uint64_t{0}; });
    WriteFixedOf<W>(n - 1, p + W, [v](size_t i) { return ZigZag(static_cast<int64_t>(v[i + 1] - v[i])); });
  });
}

}  // namespace

void EncodePlainColumn(const uint64_t* v, size_t n, ByteBuf* out) { PlainColumnOfWidth(v, n, WidthFor(MaxOf(v, n)), out); }

void EncodeZigZagColumn(const uint64_t* v, size_t n, ByteBuf* out) {
  // Two passes over the values (max, then write) instead of a temporary
  // array: batches are at most 65536 values and stay in cache.
  uint64_t max = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t z = ZigZag(static_cast<int64_t>(v[i]));
    max = z > max ? z : max;
  }
  ZigZagColumnOfWidth(v, n, WidthFor(max), out);
}

void EncodeDeltaColumn(const uint64_t* v, size_t n, ByteBuf* out) {
  uint64_t max = 0;
  for (size_t i = 1; i < n; i++) {
    uint64_t z = ZigZag(static_cast<int64_t>(v[i] - v[i - 1]));  // mod 2^64
    max = z > max ? z : max;
  }
  DeltaColumnOfWidth(v, n, WidthFor(max), out);
}

void EncodeF64Column(const uint64_t* v, size_t n, ByteBuf* out) {
  out->push_back(ColumnEncoding(ColumnScheme::kF64, 8));
  PutFixedArray(v, n, 8, out);
}

void EncodeBytesColumn(const uint64_t* lens, size_t n, const uint8_t* data, size_t data_len, ByteBuf* out) {
  unsigned w = WidthFor(MaxOf(lens, n));
  out->push_back(ColumnEncoding(ColumnScheme::kBytes, w));
  PutFixedArray(lens, n, w, out);
  PutBytes(out, data, data_len);
}

namespace {

// The integer of value i before the shift: the value (PLAIN, ZIGZAG) or its
// delta from the previous one (DELTA, mod 2^64).
inline uint64_t PrePacked(ColumnScheme scheme, const uint64_t* v, size_t i, uint64_t base) {
  return scheme == ColumnScheme::kDelta ? v[i] - (i ? v[i - 1] : base) : v[i];
}

inline uint64_t Stored(ColumnScheme scheme, uint64_t x, unsigned shift) {
  if (scheme == ColumnScheme::kPlain) return x >> shift;
  return ZigZag(static_cast<int64_t>(x) >> shift);  // arithmetic: keeps the sign
}

template <unsigned W, typename StoredOf>
void WritePlanesOf(size_t n, uint8_t* planes, StoredOf stored_of) {
  for (size_t i = 0; i < n; i++) {
    const uint64_t s = stored_of(i);
    for (unsigned k = 0; k < W; k++) planes[k * n + i] = static_cast<uint8_t>(s >> (8 * k));
  }
}

// Appends n * w bytes of planes; a constant width per loop, so the byte stores unroll.
template <typename StoredOf>
void PutPlanes(size_t n, unsigned w, ByteBuf* out, StoredOf stored_of) {
  PutWidth(n, w, out, [&](uint8_t* planes, auto W) { WritePlanesOf<W>(n, planes, stored_of); });
}

}  // namespace

void EncodePackedColumn(ColumnScheme scheme, const uint64_t* v, size_t n, ByteBuf* out) {
  const uint64_t base = n ? v[0] : 0;
  // One pass for the shift and the widest stored value: both shifts are
  // monotone, so the widest stored value comes from the extremes (the
  // largest value for PLAIN; the smallest and largest signed value for the
  // zigzag schemes, whose zigzag grows with the magnitude).
  uint64_t any = 0, umax = 0;
  int64_t smin = 0, smax = 0;
  if (scheme == ColumnScheme::kPlain) {
    for (size_t i = 0; i < n; i++) {
      any |= v[i];
      umax = v[i] > umax ? v[i] : umax;
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      const uint64_t x = PrePacked(scheme, v, i, base);
      const auto sx = static_cast<int64_t>(x);
      any |= x;
      smin = sx < smin ? sx : smin;
      smax = sx > smax ? sx : smax;
    }
  }
  const unsigned shift = any ? static_cast<unsigned>(std::countr_zero(any)) : 0;
  uint64_t max;
  if (scheme == ColumnScheme::kPlain) {
    max = umax >> shift;
  } else {
    const uint64_t lo = ZigZag(smin >> shift), hi = ZigZag(smax >> shift);
    max = lo > hi ? lo : hi;
  }
  const unsigned w = WidthFor(max);
  if (shift == 0 && w < 2) {  // nothing to gain: the classic column, of the same width
    switch (scheme) {
      case ColumnScheme::kZigZag: ZigZagColumnOfWidth(v, n, w, out); return;
      case ColumnScheme::kDelta: DeltaColumnOfWidth(v, n, w, out); return;
      default: PlainColumnOfWidth(v, n, w, out); return;
    }
  }
  const auto packed = static_cast<ColumnScheme>(static_cast<unsigned>(scheme) + 5);
  out->push_back(ColumnEncoding(packed, w));
  out->push_back(static_cast<uint8_t>(shift));
  if (scheme == ColumnScheme::kDelta) PutFixed(out, base, 8);
  PutPlanes(n, w, out, [&](size_t i) { return Stored(scheme, PrePacked(scheme, v, i, base), shift); });
}

void EncodePackedUIntColumn(const uint64_t* v, size_t n, ByteBuf* out) {
  // A constant column as DELTA: encoding byte, base, no deltas (W = 0).
  constexpr size_t kConstantBytes = 1 + 8;
  if (n > 0 && n * WidthFor(v[0]) > kConstantBytes && std::all_of(v, v + n, [&](uint64_t x) { return x == v[0]; })) {
    EncodeDeltaColumn(v, n, out);
    return;
  }
  EncodePackedColumn(ColumnScheme::kPlain, v, n, out);
}

void EncodePackedRelColumn(const uint64_t* v, const uint64_t* ref, uint8_t ref_index, size_t n, ByteBuf* out) {
  uint64_t any = 0;
  for (size_t i = 0; i < n; i++) any |= v[i] - ref[i];
  const unsigned shift = any ? static_cast<unsigned>(std::countr_zero(any)) : 0;
  auto stored = [&](size_t i) { return ZigZag(static_cast<int64_t>(v[i] - ref[i]) >> shift); };
  uint64_t max = 0;
  for (size_t i = 0; i < n; i++) max = std::max(max, stored(i));
  const unsigned w = WidthFor(max);
  out->push_back(ColumnEncoding(ColumnScheme::kPackedRel, w));
  out->push_back(ref_index);
  out->push_back(static_cast<uint8_t>(shift));
  PutPlanes(n, w, out, stored);
}

}  // namespace flightrec::format
