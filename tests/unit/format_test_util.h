// Helpers shared by the format_* unit tests: a temporary directory, whole-file
// I/O, a deterministic fake PcDescriber, block-boundary discovery, and
// whole-column decoding checks.
#pragma once
#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "format/block_scanner.h"
#include "format/column_decoder.h"
#include "format/segment_reader.h"
#include "format/segment_writer.h"
#include "format/varint.h"

namespace format_test {

using namespace flightrec::format;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/flightrec-format-test-XXXXXX";
    path = mkdtemp(tmpl) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string File(const std::string& name) const { return path + "/" + name; }
};

inline std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void WriteAll(const std::string& path, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

// pcs in [0x400000, 0x500000) are in "/usr/bin/fake"; odd pcs carry an
// inlined frame; pcs >= 0x900000 are in no mapping.
class FakeDescriber : public PcDescriber {
 public:
  int calls = 0;
  bool Describe(uint64_t pc, MappingInfo* m, std::vector<FrameLine>* lines) override {
    calls++;
    if (pc >= 0x900000) return false;
    m->start = 0x400000;
    m->end = 0x500000;
    m->file_offset = 0x1000;
    m->path = "/usr/bin/fake";
    m->build_id = "abcdef0123";
    if (pc & 1) lines->push_back({"inlined_helper", "helper.h", 7});
    lines->push_back({"fn_" + std::to_string(pc), "fake.cc", static_cast<uint32_t>(pc & 0xfff)});
    return true;
  }
};

inline SegmentHeaderInfo Header(uint64_t seq = 0) {
  SegmentHeaderInfo h;
  h.pid = 4242;
  h.sequence = seq;
  h.anchor_monotonic_ns = 1'000'000'000;
  h.anchor_realtime_ns = 1'700'000'000'000'000'000ull;
  h.service = "svc";
  h.host = "host-a";
  return h;
}

struct BlockInfo {
  uint64_t offset, end;
  uint16_t kind;
};

// Block layout of an intact segment (header_len from the header bytes).
inline std::vector<BlockInfo> Blocks(const std::vector<uint8_t>& d) {
  std::vector<BlockInfo> out;
  size_t header_len = static_cast<size_t>(LoadLE(d.data() + 12, 4));
  BlockScanner s(d.data(), d.size(), header_len);
  std::vector<Problem> problems;
  RawBlock b;
  while (s.Next(&b, &problems)) out.push_back({b.offset, b.offset + 20 + b.payload_len, b.kind});
  return out;
}

// Decodes a column of `count` values that must take up all of enc.
inline DecodedColumn DecodeWhole(const ByteBuf& enc, uint32_t count) {
  ByteCursor c(enc.data(), enc.size());
  DecodedColumn col;
  std::string why;
  REQUIRE_MESSAGE(DecodeColumn(&c, count, &col, &why), why);
  CHECK(c.remaining() == 0);
  return col;
}

// Every proper prefix of a valid column is refused, with a reason.
inline void CheckTruncationsRefused(const ByteBuf& enc, uint32_t count) {
  for (size_t n = 0; n < enc.size(); n++) {
    ByteCursor c(enc.data(), n);
    DecodedColumn col;
    std::string why;
    CHECK_FALSE(DecodeColumn(&c, count, &col, &why));
    CHECK_FALSE(why.empty());
  }
}

}  // namespace format_test
