// BlockScanner: block framing, CRC checks and resynchronisation (SPEC.md 4.2).
#include "format/block_scanner.h"

#include "format/crc32c.h"
#include "format/format_constants.h"
#include "format/framing.h"
#include "format/varint.h"

namespace flightrec::format {

BlockScanner::BlockScanner(const uint8_t* data, size_t size, size_t start)
    : data_(data), size_(size), pos_(start > size ? size : start) {}

BlockScanner::HeaderCheck BlockScanner::Check(size_t p, std::string* why) const {
  const uint8_t* h = data_ + p;
  uint32_t sync = static_cast<uint32_t>(LoadLE(h, 4));
  uint32_t payload_len = static_cast<uint32_t>(LoadLE(h + 4, 4));
  uint16_t flags = static_cast<uint16_t>(LoadLE(h + 10, 2));
  uint32_t raw_len = static_cast<uint32_t>(LoadLE(h + 12, 4));
  if (sync != kBlockSync) {
    if (why) *why = "no block sync word";
    return HeaderCheck::kBad;
  }
  if (payload_len > kMaxBlockBytes || raw_len > kMaxBlockBytes || (!(flags & kFlagZstd) && payload_len != raw_len)) {
    if (why) *why = "impossible block length";
    return HeaderCheck::kBad;
  }
  if (payload_len > size_ - p - kBlockHeaderBytes) return HeaderCheck::kPastEnd;
  return HeaderCheck::kOk;
}

bool BlockScanner::CrcOk(size_t p) const {
  const uint8_t* h = data_ + p;
  uint32_t payload_len = static_cast<uint32_t>(LoadLE(h + 4, 4));
  uint32_t crc = Crc32c(0, h + 4, 12);
  crc = Crc32c(crc, h + kBlockHeaderBytes, payload_len);
  return crc == static_cast<uint32_t>(LoadLE(h + 16, 4));
}

namespace {

constexpr uint32_t kPoly = 0x82F63B78;  // reflected CRC-32C polynomial

// a(x) * b(x) modulo the CRC polynomial, in the reflected bit order (zlib's
// multmodp): the CRC register is a polynomial over GF(2).
uint32_t MulModP(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// The register after `n` zero bytes, from `reg`: reg * x^(8n). O(log n).
uint32_t ShiftRegister(uint32_t reg, uint64_t n) {
  static const auto powers = [] {  // x^(8 * 2^k), k = 0..63
    std::vector<uint32_t> t(64);
    uint32_t x8 = 1u << 23;  // x^8 in reflected order (x^0 is bit 31)
    t[0] = x8;
    for (int k = 1; k < 64; k++) t[k] = MulModP(t[k - 1], t[k - 1]);
    return t;
  }();
  for (int k = 0; n; k++, n >>= 1)
    if (n & 1) reg = MulModP(powers[k], reg);
  return reg;
}

}  // namespace

uint32_t BlockScanner::PrefixRegister(size_t i) const {
  if (prefix_.empty()) {
    prefix_.reserve(size_ / kPrefixSpacing + 1);
    uint32_t reg = 0;
    prefix_.push_back(0);
    for (size_t p = 0; p + kPrefixSpacing <= size_; p += kPrefixSpacing) {
      reg = ~Crc32c(~reg, data_ + p, kPrefixSpacing);
      prefix_.push_back(reg);
    }
  }
  size_t base = i - i % kPrefixSpacing;
  uint32_t reg = prefix_[base / kPrefixSpacing];
  return i == base ? reg : ~Crc32c(~reg, data_ + base, i - base);
}

uint32_t BlockScanner::IndexedCrc(size_t p) const {
  // reg(r, X ++ Y) = shift_|Y|(reg(r, X)) ^ reg(0, Y), and the register of
  // data_[a, b) from 0 is P(b) ^ shift_(b-a)(P(a)).
  uint32_t payload_len = static_cast<uint32_t>(LoadLE(data_ + p + 4, 4));
  size_t a = p + kBlockHeaderBytes, b = a + payload_len;
  uint32_t head = ~Crc32c(0, data_ + p + 4, 12);  // register after the header fields
  return ~(ShiftRegister(head ^ PrefixRegister(a), payload_len) ^ PrefixRegister(b));
}

size_t BlockScanner::Resync(size_t from) const {
  // Every position is examined at most once per scan: the caller continues at
  // the returned offset, which is past everything examined. Each candidate's
  // CRC costs O(kPrefixSpacing + log length), whatever length it declares.
  for (size_t q = from; q + kBlockHeaderBytes <= size_; q++) {
    if (data_[q] != 0x46 || static_cast<uint32_t>(LoadLE(data_ + q, 4)) != kBlockSync) continue;
    if (Check(q, nullptr) == HeaderCheck::kOk && IndexedCrc(q) == static_cast<uint32_t>(LoadLE(data_ + q + 16, 4)))
      return q;
  }
  return size_;
}

void BlockScanner::SkipTo(size_t from, size_t q, std::vector<Problem>* problems) {
  if (q < size_) {
    problems->push_back(
        {from, "skipped " + std::to_string(q - from) + " bytes to the next good block at offset " + std::to_string(q)});
  } else {
    problems->push_back({from, "no good block after offset " + std::to_string(from) + "; " +
                                   std::to_string(size_ - from) + " bytes unreadable"});
  }
  pos_ = q;
}

bool BlockScanner::Next(RawBlock* block, std::vector<Problem>* problems) {
  while (pos_ < size_) {
    size_t p = pos_;
    if (size_ - p < kBlockHeaderBytes) {
      truncated_ = true;
      truncated_at_ = p;
      pos_ = size_;
      return false;
    }
    std::string why;
    HeaderCheck c = Check(p, &why);
    if (c == HeaderCheck::kPastEnd) {
      // Either the writer's last block, cut short (truncated: not an error),
      // or a corrupt length in the middle of the file (a good block follows).
      size_t q = Resync(p + 1);
      if (q == size_) {
        truncated_ = true;
        truncated_at_ = p;
        pos_ = size_;
        return false;
      }
      bad_blocks_++;
      problems->push_back({p, "corrupt block length at offset " + std::to_string(p)});
      SkipTo(p, q, problems);
      continue;
    }
    if (c == HeaderCheck::kBad || !CrcOk(p)) {
      bad_blocks_++;
      problems->push_back(
          {p, (c == HeaderCheck::kBad ? why : std::string("bad CRC")) + " at offset " + std::to_string(p)});
      SkipTo(p, Resync(p + 1), problems);
      continue;
    }
    block->offset = p;
    block->payload_len = static_cast<uint32_t>(LoadLE(data_ + p + 4, 4));
    block->kind = static_cast<uint16_t>(LoadLE(data_ + p + 8, 2));
    block->flags = static_cast<uint16_t>(LoadLE(data_ + p + 10, 2));
    block->raw_len = static_cast<uint32_t>(LoadLE(data_ + p + 12, 4));
    block->payload = data_ + p + kBlockHeaderBytes;
    pos_ = p + kBlockHeaderBytes + block->payload_len;
    return true;
  }
  return false;
}

}  // namespace flightrec::format
