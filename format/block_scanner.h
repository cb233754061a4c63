// BlockScanner: walks the block stream of a segment held in memory and
// yields each block whose framing and CRC check out, recovering from damage
// as SPEC.md 4.2 prescribes (resync on the sync word; a block cut short at
// end of file means "truncated", not "corrupt"). Payloads are returned as
// stored (possibly compressed); the caller decompresses and parses them.
// Resynchronisation checks candidate CRCs from prefix registers (SPEC.md 4.2,
// "Resynchronising in linear time"), so a file of false sync words costs time
// linear in its size, not the sum of the lengths its candidates declare.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace flightrec::format {

struct Problem {
  uint64_t offset = 0;  // file offset the problem was found at
  std::string message;  // one line, names the offset
};

struct RawBlock {
  uint64_t offset = 0;  // of the block header
  uint16_t kind = 0;
  uint16_t flags = 0;
  uint32_t raw_len = 0;
  const uint8_t* payload = nullptr;  // stored bytes, inside the scanned buffer
  uint32_t payload_len = 0;
};

class BlockScanner {
 public:
  // Scans data[start, size).
  BlockScanner(const uint8_t* data, size_t size, size_t start);

  // Next valid block, or false at the end of the stream. Problems met on the
  // way (bad CRC, bad header, skipped bytes) are appended to *problems.
  bool Next(RawBlock* block, std::vector<Problem>* problems);

  bool truncated() const { return truncated_; }
  uint64_t truncated_at() const { return truncated_at_; }
  uint64_t bad_blocks() const { return bad_blocks_; }

 private:
  enum class HeaderCheck { kOk, kBad, kPastEnd };
  HeaderCheck Check(size_t p, std::string* why) const;
  bool CrcOk(size_t p) const;
  // First offset >= from holding a complete block with a good CRC, or size_.
  size_t Resync(size_t from) const;
  // The CRC of the block at p, from prefix registers (built on first use).
  uint32_t IndexedCrc(size_t p) const;
  // Zero-based CRC register of data_[0, i).
  uint32_t PrefixRegister(size_t i) const;
  void SkipTo(size_t from, size_t q, std::vector<Problem>* problems);

  const uint8_t* data_;
  size_t size_;
  size_t pos_;
  bool truncated_ = false;
  uint64_t truncated_at_ = 0;
  uint64_t bad_blocks_ = 0;
  static constexpr size_t kPrefixSpacing = 128;
  mutable std::vector<uint32_t> prefix_;  // register of data_[0, k * kPrefixSpacing)
};

}  // namespace flightrec::format
