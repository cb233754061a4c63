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

}  // namespace

bool DecodeColumn(ByteCursor* cur, uint32_t count, DecodedColumn* out, std::string* why) {
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
    case ColumnScheme::kPlain:
      return ReadFixedArray(cur, count, w, &out->ints, why);
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
  }
  *why = "unknown column scheme " + std::to_string(enc >> 4);
  return false;
}

}  // namespace flightrec::format
