// Column encodings of EVENTS blocks (SPEC.md 5.4): one column per field,
// `u8 encoding = (scheme << 4) | W` followed by fixed-width little-endian
// data. The writer picks the smallest width W in {0,1,2,4,8} that holds every
// stored integer of the column, so a decoder never branches per value.
//
// The packed schemes (5-7) store the same integers shifted right by the bits
// every value has zero at the bottom, as W byte planes (all first bytes, then
// all second bytes, ...). zstd compresses a plane of similar bytes far better
// than interleaved fixed-width values (measured on socket.op: 2.19 -> 1.72
// bytes per event on redis-benchmark traffic).
#pragma once
#include <cstddef>
#include <cstdint>

#include "format/mi_containers.h"

namespace flightrec::format {

enum class ColumnScheme : uint8_t {
  kPlain = 0,   // unsigned values
  kZigZag = 1,  // signed values, zigzag-mapped
  kDelta = 2,   // u64 base, then zigzag deltas (times)
  kF64 = 3,     // raw IEEE-754 doubles, W = 8
  kBytes = 4,   // width-coded lengths, then the concatenated bytes
  // u8 shift, [u64 base for DELTA], then W byte planes of the stored integers:
  kPackedPlain = 5,   // v >> shift
  kPackedZigZag = 6,  // zigzag(v >> shift), arithmetic shift
  kPackedDelta = 7,   // zigzag((v[i] - v[i-1]) >> shift), arithmetic shift
  // u8 ref (an earlier integer column of the block), u8 shift, W planes of
  // zigzag((v[i] - ref[i]) >> shift): a column that follows another one (a
  // connection id and its fd) costs next to nothing.
  kPackedRel = 8,
};

// PLAIN/ZIGZAG/DELTA for their packed forms (and for themselves).
inline constexpr ColumnScheme UnpackedScheme(ColumnScheme s) {
  return s >= ColumnScheme::kPackedPlain && s <= ColumnScheme::kPackedDelta
             ? static_cast<ColumnScheme>(static_cast<unsigned>(s) - 5)
             : s;
}

inline constexpr uint8_t ColumnEncoding(ColumnScheme s, unsigned width) {
  return static_cast<uint8_t>((static_cast<unsigned>(s) << 4) | width);
}
inline constexpr ColumnScheme EncodingScheme(uint8_t enc) { return static_cast<ColumnScheme>(enc >> 4); }
inline constexpr unsigned EncodingWidth(uint8_t enc) { return enc & 0x0f; }
inline constexpr bool ValidWidth(unsigned w) { return w == 0 || w == 1 || w == 2 || w == 4 || w == 8; }

// Smallest W in {0,1,2,4,8} such that every value <= max fits in W bytes.
unsigned WidthFor(uint64_t max);

using ByteBuf = MiVector<uint8_t>;

// Each appends one complete column (encoding byte + data) for n values to out.
void EncodePlainColumn(const uint64_t* v, size_t n, ByteBuf* out);
// v holds int64 bit patterns.
void EncodeZigZagColumn(const uint64_t* v, size_t n, ByteBuf* out);
// base = v[0]; deltas are taken modulo 2^64 and zigzag-mapped, so any sequence
// (including times that go backwards) round-trips.
void EncodeDeltaColumn(const uint64_t* v, size_t n, ByteBuf* out);
// v holds IEEE-754 bit patterns.
void EncodeF64Column(const uint64_t* v, size_t n, ByteBuf* out);
// lens[i] bytes of value i, concatenated in data (data_len == sum of lens).
void EncodeBytesColumn(const uint64_t* lens, size_t n, const uint8_t* data, size_t data_len, ByteBuf* out);

// The packed form of scheme (kPlain, kZigZag or kDelta; v as for the encoders
// above) when it can differ from the plain one: a shift, or values of 2 bytes
// or more. Otherwise the unpacked column, exactly as the encoders above write it.
void EncodePackedColumn(ColumnScheme scheme, const uint64_t* v, size_t n, ByteBuf* out);

// An unsigned column of a packed event type: packed PLAIN, or DELTA when
// every value is the same and that is smaller (then the column is its base
// alone: a thread id in a one-thread batch, say, costs 10 bytes, not 2 per
// event, and never reaches zstd).
void EncodePackedUIntColumn(const uint64_t* v, size_t n, ByteBuf* out);

// v as differences from ref, the stored 64-bit values of the block's column
// number ref_index (which must come before this one).
void EncodePackedRelColumn(const uint64_t* v, const uint64_t* ref, uint8_t ref_index, size_t n, ByteBuf* out);

}  // namespace flightrec::format
