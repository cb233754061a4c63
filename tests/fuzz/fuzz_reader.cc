// libFuzzer target for the C++ segment reader (make fuzz). Each input is read
// twice: as given (exercising framing, CRC checks and resync), and with the
// header and block CRCs recomputed (so mutations reach the payload parsers
// instead of dying at the CRC check). The reader must never crash, hang or
// allocate without bound; ASan/UBSan and libFuzzer's limits enforce that.
#include <cstdint>
#include <cstring>
#include <vector>

#include "format/crc32c.h"
#include "format/framing.h"
#include "format/segment_reader.h"
#include "format/varint.h"

using namespace flightrec::format;

namespace {

void RepairCrcs(std::vector<uint8_t>* buf) {
  std::vector<uint8_t>& d = *buf;
  if (d.size() < kMinHeaderLen) return;
  size_t header_len = static_cast<size_t>(LoadLE(d.data() + 12, 4));
  if (header_len < kMinHeaderLen || header_len > d.size()) return;
  StoreLE32(d.data() + header_len - 4, Crc32c(0, d.data(), header_len - 4));
  size_t p = header_len;
  while (p + kBlockHeaderBytes <= d.size()) {
    uint32_t len = static_cast<uint32_t>(LoadLE(d.data() + p + 4, 4));
    if (len > d.size() - p - kBlockHeaderBytes) break;
    uint32_t crc = Crc32c(Crc32c(0, d.data() + p + 4, 12), d.data() + p + kBlockHeaderBytes, len);
    StoreLE32(d.data() + p + 16, crc);
    p += kBlockHeaderBytes + len;
  }
}

void Check(const Segment& seg, const ReaderOptions& opt) {
  // Invariants a caller relies on; a violation is a reader bug.
  if (seg.events.size() > opt.max_events) __builtin_trap();
  for (const Event& e : seg.events) {
    auto it = seg.schema.find(e.type_id);
    if (it == seg.schema.end() || it->second.fields.size() != e.values.size()) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ReaderOptions opt;
  opt.max_events = 1 << 16;
  Check(ReadSegment(data, size, opt), opt);
  std::vector<uint8_t> repaired(data, data + size);
  RepairCrcs(&repaired);
  Check(ReadSegment(repaired.data(), repaired.size(), opt), opt);
  return 0;
}
