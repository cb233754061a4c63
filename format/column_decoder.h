// Column decoder for EVENTS blocks (SPEC.md 5.4), used by the C++ reader.
// Works on untrusted bytes: every length is checked before it is used.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/column_encoder.h"
#include "format/varint.h"

namespace flightrec::format {

struct DecodedColumn {
  ColumnScheme scheme = ColumnScheme::kPlain;
  // PLAIN/ZIGZAG/DELTA: the decoded 64-bit values (two's complement for
  // signed). F64: the IEEE-754 bit patterns. BYTES: unused.
  std::vector<uint64_t> ints;
  // BYTES: one view per value into the payload being decoded.
  std::vector<std::string_view> bytes;
};

// Decodes one column of `count` values at the cursor. On failure returns
// false with *why set; the cursor position is then unspecified. `earlier`
// holds the block's columns decoded so far (nearlier of them): a PACKED_REL
// column is stored relative to one of them.
bool DecodeColumn(ByteCursor* cur, uint32_t count, DecodedColumn* out, std::string* why,
                  const DecodedColumn* earlier = nullptr, size_t nearlier = 0);

}  // namespace flightrec::format
