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

void EncodePlainColumn(const uint64_t* v, size_t n, ByteBuf* out) {
  PlainColumnOfWidth(v, n, WidthFor(MaxOf(v, n)), out);
}

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

namespace {

// The OR of the values and the OR of their differences (xor) from the first
// one, in one pass of independent accumulators (no compare per value, and
// the four chains run side by side). The OR has the largest value's top bit,
// so it gives the same width; its low zero bits are the shift; diff is 0 for
// a constant column.
struct OrSummary {
  uint64_t any = 0, diff = 0;
};
OrSummary SummarizeUnsigned(const uint64_t* v, size_t n) {
  if (n == 0) return {};
  // Two 64-bit lanes per operation (SSE2, the baseline): -O2 leaves the
  // plain loop scalar, and this pass runs over every unsigned column.
  typedef uint64_t U2 __attribute__((vector_size(16)));
  const uint64_t first = v[0];
  const U2 f2 = {first, first};
  U2 a0 = {0, 0}, a1 = {0, 0}, d0 = {0, 0}, d1 = {0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    U2 x, y;
    std::memcpy(&x, v + i, 16);
    std::memcpy(&y, v + i + 2, 16);
    a0 |= x;
    a1 |= y;
    d0 |= x ^ f2;
    d1 |= y ^ f2;
  }
  const U2 a = a0 | a1, d = d0 | d1;
  uint64_t any = a[0] | a[1], diff = d[0] | d[1];
  for (; i < n; i++) {
    any |= v[i];
    diff |= v[i] ^ first;
  }
  return {any, diff};
}

// Packed PLAIN (or the classic column when packing gains nothing) of values
// whose OR is `any`: the widest stored value, max >> shift, has the top bit
// of any >> shift, hence the same width.
void PackedPlainOf(const uint64_t* v, size_t n, uint64_t any, ByteBuf* out) {
  const unsigned shift = any ? static_cast<unsigned>(std::countr_zero(any)) : 0;
  const unsigned w = WidthFor(any >> shift);
  if (shift == 0 && w < 2) {  // nothing to gain: the classic column, of the same width
    PlainColumnOfWidth(v, n, w, out);
    return;
  }
  out->push_back(ColumnEncoding(ColumnScheme::kPackedPlain, w));
  out->push_back(static_cast<uint8_t>(shift));
  PutPlanes(n, w, out, [&](size_t i) { return v[i] >> shift; });
}

// The widest of zigzag(x >> shift) over signed values between smin and smax
// (both shifts and zigzag grow with the magnitude on each side of 0, so the
// extremes give it; smin <= 0 <= smax).
uint64_t WidestZigZag(int64_t smin, int64_t smax, unsigned shift) {
  const uint64_t lo = ZigZag(smin >> shift), hi = ZigZag(smax >> shift);
  return lo > hi ? lo : hi;
}

}  // namespace

void EncodePackedColumn(ColumnScheme scheme, const uint64_t* v, size_t n, ByteBuf* out) {
  if (scheme == ColumnScheme::kPlain) {
    PackedPlainOf(v, n, SummarizeUnsigned(v, n).any, out);
    return;
  }
  const uint64_t base = n ? v[0] : 0;
  // One pass for the shift and the widest stored value (WidestZigZag). A
  // DELTA column's first value is 0 (from the base): it changes neither.
  uint64_t any = 0;
  int64_t smin = 0, smax = 0;
  for (size_t i = scheme == ColumnScheme::kDelta ? 1 : 0; i < n; i++) {
    const uint64_t x = scheme == ColumnScheme::kDelta ? v[i] - v[i - 1] : v[i];
    const auto sx = static_cast<int64_t>(x);
    any |= x;
    smin = sx < smin ? sx : smin;
    smax = sx > smax ? sx : smax;
  }
  const unsigned shift = any ? static_cast<unsigned>(std::countr_zero(any)) : 0;
  const unsigned w = WidthFor(WidestZigZag(smin, smax, shift));
  if (shift == 0 && w < 2) {  // nothing to gain: the classic column, of the same width
    if (scheme == ColumnScheme::kDelta) DeltaColumnOfWidth(v, n, w, out);
    else ZigZagColumnOfWidth(v, n, w, out);
    return;
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
  const OrSummary sum = SummarizeUnsigned(v, n);
  if (n > 0 && n * WidthFor(v[0]) > kConstantBytes && sum.diff == 0) {
    DeltaColumnOfWidth(v, n, 0, out);
    return;
  }
  PackedPlainOf(v, n, sum.any, out);
}

void EncodePackedRelColumn(const uint64_t* v, const uint64_t* ref, uint8_t ref_index, size_t n, ByteBuf* out) {
  // One pass: the shift, and the widest stored value from the extremes (WidestZigZag).
  uint64_t any = 0;
  int64_t smin = 0, smax = 0;
  for (size_t i = 0; i < n; i++) {
    const uint64_t x = v[i] - ref[i];
    const auto sx = static_cast<int64_t>(x);
    any |= x;
    smin = sx < smin ? sx : smin;
    smax = sx > smax ? sx : smax;
  }
  const unsigned shift = any ? static_cast<unsigned>(std::countr_zero(any)) : 0;
  const unsigned w = WidthFor(WidestZigZag(smin, smax, shift));
  out->push_back(ColumnEncoding(ColumnScheme::kPackedRel, w));
  out->push_back(ref_index);
  out->push_back(static_cast<uint8_t>(shift));
  PutPlanes(n, w, out, [&](size_t i) { return ZigZag(static_cast<int64_t>(v[i] - ref[i]) >> shift); });
}

}  // namespace flightrec::format
