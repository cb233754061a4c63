// Unit tests for the format's low-level codecs: CRC32C, varints, zigzag and
// the EVENTS column encodings (widths, round trips, bounds).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "format/column_decoder.h"
#include "format/column_encoder.h"
#include "format/crc32c.h"
#include "format/varint.h"
#include "tests/unit/format_test_util.h"

using namespace flightrec::format;
using format_test::CheckTruncationsRefused;
using format_test::DecodeWhole;

TEST_CASE("format crc32c matches the standard check values") {
  const char* s = "123456789";
  CHECK(Crc32c(0, s, 9) == 0xE3069283u);
  CHECK(Crc32cPortable(0, s, 9) == 0xE3069283u);
  CHECK(Crc32c(0, "", 0) == 0u);
  // RFC 3720 B.4: 32 bytes of zeros and of 0xff.
  uint8_t zeros[32] = {}, ones[32];
  std::memset(ones, 0xff, sizeof(ones));
  CHECK(Crc32c(0, zeros, 32) == 0x8A9136AAu);
  CHECK(Crc32c(0, ones, 32) == 0x62A8AB43u);
}

TEST_CASE("format crc32c hardware and portable paths agree at every length and alignment") {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf(1100);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t start = 0; start < 9; start++) {
    for (size_t len = 0; start + len <= buf.size(); len += (len < 40 ? 1 : 37)) {
      uint32_t a = Crc32c(0, buf.data() + start, len);
      uint32_t b = Crc32cPortable(0, buf.data() + start, len);
      REQUIRE(a == b);
      // Incremental: split anywhere.
      size_t cut = len / 3;
      CHECK(Crc32c(Crc32c(0, buf.data() + start, cut), buf.data() + start + cut, len - cut) == a);
    }
  }
}

#if defined(__x86_64__)
TEST_CASE("format crc32c takes the hardware path exactly when the CPU has SSE4.2") {
  // Crc32cHardware reads glibc's copy of the CPUID bits; the instruction
  // itself must agree.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  REQUIRE(__get_cpuid(1, &eax, &ebx, &ecx, &edx));
  CHECK(Crc32cHardware() == ((ecx & bit_SSE4_2) != 0));
}
#endif

TEST_CASE("format varint round trips and rejects malformed input") {
  const uint64_t values[] = {
      0, 1, 127, 128, 255, 300, 16383, 16384, (1ull << 32) - 1, 1ull << 32, (1ull << 63) - 1, 1ull << 63, UINT64_MAX};
  for (uint64_t v : values) {
    std::vector<uint8_t> b;
    PutUvarint(&b, v);
    CHECK(b.size() <= kMaxVarintBytes);
    ByteCursor c(b.data(), b.size());
    uint64_t got = 0;
    REQUIRE(c.Uvarint(&got));
    CHECK(got == v);
    CHECK(c.remaining() == 0);
    // Every proper prefix is incomplete.
    for (size_t n = 0; n < b.size(); n++) {
      ByteCursor p(b.data(), n);
      CHECK_FALSE(p.Uvarint(&got));
    }
  }
  std::vector<uint8_t> eleven(11, 0x80);
  eleven.back() = 0;
  ByteCursor c11(eleven.data(), eleven.size());
  uint64_t v;
  CHECK_FALSE(c11.Uvarint(&v));  // more than 10 bytes
  std::vector<uint8_t> overflow(9, 0xff);
  overflow.push_back(0x02);  // bit 64 set
  ByteCursor co(overflow.data(), overflow.size());
  CHECK_FALSE(co.Uvarint(&v));
  std::vector<uint8_t> padded = {0x81, 0x80, 0x00};  // non-minimal but legal
  ByteCursor cp(padded.data(), padded.size());
  REQUIRE(cp.Uvarint(&v));
  CHECK(v == 1);
}

TEST_CASE("format zigzag maps small magnitudes to small codes") {
  CHECK(ZigZag(0) == 0);
  CHECK(ZigZag(-1) == 1);
  CHECK(ZigZag(1) == 2);
  CHECK(ZigZag(-2) == 3);
  CHECK(ZigZag(INT64_MAX) == UINT64_MAX - 1);
  CHECK(ZigZag(INT64_MIN) == UINT64_MAX);
  for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{5}, INT64_MIN, INT64_MAX, int64_t{-123456789}})
    CHECK(UnZigZag(ZigZag(v)) == v);
}

TEST_CASE("format column widths are the smallest that fit") {
  CHECK(WidthFor(0) == 0);
  CHECK(WidthFor(1) == 1);
  CHECK(WidthFor(255) == 1);
  CHECK(WidthFor(256) == 2);
  CHECK(WidthFor(65535) == 2);
  CHECK(WidthFor(65536) == 4);
  CHECK(WidthFor(0xffffffffu) == 4);
  CHECK(WidthFor(0x100000000ull) == 8);

  std::vector<uint64_t> small = {0, 7, 255, 3};
  ByteBuf enc;
  EncodePlainColumn(small.data(), small.size(), &enc);
  CHECK(enc.size() == 1 + 4);  // values < 256 -> width 1
  CHECK(enc[0] == ColumnEncoding(ColumnScheme::kPlain, 1));
  CHECK(DecodeWhole(enc, 4).ints == small);

  std::vector<uint64_t> zeros(1000, 0);
  enc.clear();
  EncodePlainColumn(zeros.data(), zeros.size(), &enc);
  CHECK(enc.size() == 1);  // width 0: no data at all
  CHECK(DecodeWhole(enc, 1000).ints == zeros);

  std::vector<uint64_t> big = {1, 1ull << 40};
  enc.clear();
  EncodePlainColumn(big.data(), big.size(), &enc);
  CHECK(enc.size() == 1 + 16);
  CHECK(DecodeWhole(enc, 2).ints == big);
}

TEST_CASE("format signed and delta columns round trip, including times going backwards") {
  std::vector<uint64_t> s = {static_cast<uint64_t>(int64_t{-3}), 100, static_cast<uint64_t>(int64_t{-128}), 0};
  ByteBuf enc;
  EncodeZigZagColumn(s.data(), s.size(), &enc);
  CHECK(enc[0] == ColumnEncoding(ColumnScheme::kZigZag, 1));  // zigzag(-128) = 255
  CHECK(DecodeWhole(enc, 4).ints == s);

  // Times 1 us apart need 2-byte deltas (zigzag(1000) = 2000), plus an
  // occasional step back and a wrap around 2^64.
  std::vector<uint64_t> t = {5'000'000'000, 5'000'001'000, 5'000'002'000, 5'000'001'500, 5'000'003'000};
  enc.clear();
  EncodeDeltaColumn(t.data(), t.size(), &enc);
  CHECK(enc[0] == ColumnEncoding(ColumnScheme::kDelta, 2));
  CHECK(enc.size() == 1 + 8 + 5 * 2);
  CHECK(DecodeWhole(enc, 5).ints == t);

  std::vector<uint64_t> wrap = {UINT64_MAX - 1, 3, 0, UINT64_MAX};
  enc.clear();
  EncodeDeltaColumn(wrap.data(), wrap.size(), &enc);
  CHECK(DecodeWhole(enc, 4).ints == wrap);

  std::vector<uint64_t> same(50, 42);
  enc.clear();
  EncodeDeltaColumn(same.data(), same.size(), &enc);
  CHECK(enc.size() == 1 + 8);  // all deltas 0: width 0
  CHECK(DecodeWhole(enc, 50).ints == same);
}

TEST_CASE("format f64 and bytes columns round trip") {
  std::vector<double> d = {0.0, -1.5, 3.141592653589793, std::nan(""), 1e300};
  std::vector<uint64_t> bits;
  for (double x : d) bits.push_back(std::bit_cast<uint64_t>(x));
  ByteBuf enc;
  EncodeF64Column(bits.data(), bits.size(), &enc);
  CHECK(DecodeWhole(enc, 5).ints == bits);

  std::string data("abchello\0", 9);
  std::vector<uint64_t> lens = {3, 0, 5, 1};
  enc.clear();
  EncodeBytesColumn(lens.data(), lens.size(), reinterpret_cast<const uint8_t*>(data.data()), 9, &enc);
  DecodedColumn col = DecodeWhole(enc, 4);
  REQUIRE(col.bytes.size() == 4);
  CHECK(col.bytes[0] == "abc");
  CHECK(col.bytes[1] == "");
  CHECK(col.bytes[2] == "hello");
  CHECK(col.bytes[3] == std::string_view("\0", 1));
}

TEST_CASE("format column decoder rejects short and malformed columns") {
  std::vector<uint64_t> v = {1000, 2000, 3000};
  ByteBuf enc;
  EncodePlainColumn(v.data(), v.size(), &enc);
  CheckTruncationsRefused(enc, 3);
  const uint8_t bad_width[] = {ColumnEncoding(ColumnScheme::kPlain, 3), 0, 0, 0};
  ByteCursor c1(bad_width, sizeof(bad_width));
  DecodedColumn col;
  std::string why;
  CHECK_FALSE(DecodeColumn(&c1, 1, &col, &why));
  const uint8_t bad_scheme[] = {0x91};
  ByteCursor c2(bad_scheme, 1);
  CHECK_FALSE(DecodeColumn(&c2, 1, &col, &why));
  // A bytes column whose lengths promise more than is there.
  const uint8_t long_bytes[] = {ColumnEncoding(ColumnScheme::kBytes, 1), 200, 'x'};
  ByteCursor c3(long_bytes, sizeof(long_bytes));
  CHECK_FALSE(DecodeColumn(&c3, 1, &col, &why));
}
