// Column decoder for EVENTS blocks; see column_decoder.h.
#include "format/column_decoder.h"

namespace flightrec::format {
namespace {

bool ReadFixedArray(ByteCursor* cur, uint32_t count, unsigned w, std::vector<uint64_t>* out, std::string* why) {
  out->assign(count, 0);
  if (w == 0) return true;
  // count <= 2^20 and w <= 8: the product cannot overflow.
  const uint8_t* p;
  if (!cur->Bytes(static_cast<size_t>(count) * w, &p)) {
    *why = "column data runs past the end of the block";
    return false;
  }
  for (uint32_t i = 0; i < count; i++) (*out)[i] = LoadLE(p + static_cast<size_t>(i) * w, w);
  return true;
}

// Schemes 5-8: [u8 ref], u8 shift, [u64 base], W byte planes (SPEC.md 5.4).
bool DecodePackedColumn(ByteCursor* cur, uint32_t count, uint8_t enc, DecodedColumn* out, std::string* why,
                        const DecodedColumn* earlier, size_t nearlier) {
  const auto scheme = static_cast<ColumnScheme>(enc >> 4);
  if (scheme < ColumnScheme::kPackedPlain || scheme > ColumnScheme::kPackedRel) {
    *why = "unknown column scheme " + std::to_string(enc >> 4);
    return false;
  }
  const unsigned w = EncodingWidth(enc);
  const DecodedColumn* ref = nullptr;
  if (scheme == ColumnScheme::kPackedRel) {
    uint8_t index;
    if (!cur->U8(&index)) {
      *why = "relative column reference runs past the end of the block";
      return false;
    }
    if (index >= nearlier || !earlier) {
      *why = "relative column refers to column " + std::to_string(index) + ", not an earlier one";
      return false;
    }
    ref = &earlier[index];
    const ColumnScheme rs = ref->scheme;
    if ((rs != ColumnScheme::kPlain && rs != ColumnScheme::kZigZag && rs != ColumnScheme::kDelta) ||
        ref->ints.size() != count) {
      *why = "relative column refers to a column that is not an integer one";
      return false;
    }
  }
  uint8_t shift;
  if (!cur->U8(&shift)) {
    *why = "packed column shift runs past the end of the block";
    return false;
  }
  if (shift > 63) {
    *why = "packed column shift " + std::to_string(shift);
    return false;
  }
  uint64_t prev = 0;
  if (scheme == ColumnScheme::kPackedDelta && !cur->Fixed(&prev, 8)) {
    *why = "delta column base runs past the end of the block";
    return false;
  }
  out->scheme = scheme == ColumnScheme::kPackedRel ? ColumnScheme::kZigZag : UnpackedScheme(scheme);
  out->ints.assign(count, 0);
  if (w != 0) {
    const uint8_t* planes;
    if (!cur->Bytes(static_cast<size_t>(count) * w, &planes)) {  // count <= 2^20, w <= 8
      *why = "column data runs past the end of the block";
      return false;
    }
    for (unsigned k = 0; k < w; k++) {
      const uint8_t* plane = planes + static_cast<size_t>(k) * count;
      for (uint32_t i = 0; i < count; i++) out->ints[i] |= static_cast<uint64_t>(plane[i]) << (8 * k);
    }
  }
  for (uint32_t i = 0; i < count; i++) {
    uint64_t& v = out->ints[i];
    switch (scheme) {
      case ColumnScheme::kPackedPlain: v <<= shift; break;
      case ColumnScheme::kPackedZigZag: v = static_cast<uint64_t>(UnZigZag(v)) << shift; break;
      case ColumnScheme::kPackedRel: v = ref->ints[i] + (static_cast<uint64_t>(UnZigZag(v)) << shift); break;
      default:  // delta: mod 2^64 by unsigned arithmetic
        prev += static_cast<uint64_t>(UnZigZag(v)) << shift;
        v = prev;
        break;
    }
  }
  return true;
}

}  // namespace

bool DecodeColumn(ByteCursor* cur, uint32_t count, DecodedColumn* out, std::string* why, const DecodedColumn* earlier,
                  size_t nearlier) {
  uint8_t enc;
  if (!cur->U8(&enc)) {
    *why = "missing column";
    return false;
  }
  unsigned w = EncodingWidth(enc);
  out->scheme = EncodingScheme(enc);
  out->bytes.clear();
  if (!ValidWidth(w)) {
    *why = "bad column width " + std::to_string(w);
    return false;
  }
  switch (out->scheme) {
    case ColumnScheme::kPlain: return ReadFixedArray(cur, count, w, &out->ints, why);
    case ColumnScheme::kZigZag:
      if (!ReadFixedArray(cur, count, w, &out->ints, why)) return false;
      for (auto& v : out->ints) v = static_cast<uint64_t>(UnZigZag(v));
      return true;
    case ColumnScheme::kDelta: {
      uint64_t prev;
      if (!cur->Fixed(&prev, 8)) {
        *why = "delta column base runs past the end of the block";
        return false;
      }
      if (!ReadFixedArray(cur, count, w, &out->ints, why)) return false;
      for (auto& v : out->ints) {
        prev += static_cast<uint64_t>(UnZigZag(v));  // mod 2^64 by unsigned arithmetic
        v = prev;
      }
      return true;
    }
    case ColumnScheme::kF64:
      if (w != 8) {
        *why = "F64 column with width " + std::to_string(w);
        return false;
      }
      return ReadFixedArray(cur, count, 8, &out->ints, why);
    case ColumnScheme::kBytes: {
      std::vector<uint64_t> lens;
      if (!ReadFixedArray(cur, count, w, &lens, why)) return false;
      out->bytes.reserve(count);
      for (uint64_t n : lens) {
        const uint8_t* p;
        if (n > cur->remaining() || !cur->Bytes(static_cast<size_t>(n), &p)) {
          *why = "bytes column data runs past the end of the block";
          return false;
        }
        out->bytes.emplace_back(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
      }
      out->ints.clear();
      return true;
    }
    case ColumnScheme::kPackedPlain:
    case ColumnScheme::kPackedZigZag:
    case ColumnScheme::kPackedDelta:
    case ColumnScheme::kPackedRel: break;
  }
  return DecodePackedColumn(cur, count, enc, out, why, earlier, nearlier);
}

}  // namespace flightrec::format
