// Packed column unit tests (prefix "format packed"): the shift + byte-plane
// forms of PLAIN, ZIGZAG and DELTA (SPEC.md 5.4, schemes 5-7) — what the
// encoder chooses, exact bytes, round trips at every width, and damaged input.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "format/column_decoder.h"
#include "format/column_encoder.h"
#include "format/segment_reader.h"
#include "format/segment_writer.h"
#include "tests/unit/format_test_util.h"

using namespace flightrec::format;
using format_test::CheckTruncationsRefused;
using format_test::DecodeWhole;

namespace {

ByteBuf Packed(ColumnScheme s, const std::vector<uint64_t>& v) {
  ByteBuf out;
  EncodePackedColumn(s, v.data(), v.size(), &out);
  return out;
}

uint64_t I(int64_t v) { return static_cast<uint64_t>(v); }

}  // namespace

TEST_CASE("format packed: times on a 64 ns grid lose their zero bits and are stored as planes") {
  // Deltas 64, 128, -64 (a step back), 6400: zigzag(delta >> 6) = 2, 4, 1, 200.
  const std::vector<uint64_t> t = {1'000'000'000, 1'000'000'064, 1'000'000'192, 1'000'000'128, 1'000'006'528};
  const ByteBuf enc = Packed(ColumnScheme::kDelta, t);
  REQUIRE(enc.size() == 1 + 1 + 8 + 5);
  CHECK(enc[0] == ColumnEncoding(ColumnScheme::kPackedDelta, 1));
  CHECK(enc[1] == 6);  // shift
  const std::vector<uint8_t> deltas(enc.end() - 5, enc.end());
  CHECK(deltas == std::vector<uint8_t>{0, 2, 4, 1, 200});
  const DecodedColumn col = DecodeWhole(enc, 5);
  CHECK(col.scheme == ColumnScheme::kDelta);  // reported as the unpacked scheme
  CHECK(col.ints == t);

  // Two-byte values: plane 0 (low bytes) first, then plane 1.
  const std::vector<uint64_t> d = {0x1235, 0x0056, 0xAB78};
  const ByteBuf plain = Packed(ColumnScheme::kPlain, d);
  REQUIRE(plain.size() == 1 + 1 + 6);
  CHECK(plain[0] == ColumnEncoding(ColumnScheme::kPackedPlain, 2));
  CHECK(plain[1] == 0);
  CHECK(std::vector<uint8_t>(plain.begin() + 2, plain.end()) ==
        std::vector<uint8_t>{0x35, 0x56, 0x78, 0x12, 0x00, 0xAB});
  CHECK(DecodeWhole(plain, 3).ints == d);
}

TEST_CASE("format packed: nothing to gain gives the classic column") {
  const std::vector<uint64_t> small = {3, 7, 255, 1};  // odd values, one byte
  const ByteBuf a = Packed(ColumnScheme::kPlain, small);
  ByteBuf b;
  EncodePlainColumn(small.data(), small.size(), &b);
  CHECK(a == b);
  const std::vector<uint64_t> same(10, 42);  // deltas all 0
  const ByteBuf c = Packed(ColumnScheme::kDelta, same);
  ByteBuf e;
  EncodeDeltaColumn(same.data(), same.size(), &e);
  CHECK(c == e);
  CHECK(DecodeWhole(c, 10).ints == same);
}

TEST_CASE("format packed: a constant unsigned column is its base alone") {
  const std::vector<uint64_t> tid(500, 12387);  // one thread's batch
  ByteBuf enc;
  EncodePackedUIntColumn(tid.data(), tid.size(), &enc);
  REQUIRE(enc.size() == 1 + 8);
  CHECK(enc[0] == ColumnEncoding(ColumnScheme::kDelta, 0));
  CHECK(DecodeWhole(enc, tid.size()).ints == tid);
  // One value that differs: the packed plain column, as before.
  std::vector<uint64_t> two = tid;
  two[250] = 12390;
  ByteBuf mixed;
  EncodePackedUIntColumn(two.data(), two.size(), &mixed);
  CHECK(mixed == Packed(ColumnScheme::kPlain, two));
  CHECK(DecodeWhole(mixed, two.size()).ints == two);
  // Where the constant form would not be smaller (a few one-byte values), plain.
  const std::vector<uint64_t> few(4, 7);
  ByteBuf small;
  EncodePackedUIntColumn(few.data(), few.size(), &small);
  CHECK(small == Packed(ColumnScheme::kPlain, few));
}

TEST_CASE("format packed: round trips at every width, signs, shifts and wraps") {
  std::mt19937_64 rng(12345);
  const unsigned bits_choices[] = {3, 9, 17, 33, 63, 64};
  for (ColumnScheme s : {ColumnScheme::kPlain, ColumnScheme::kZigZag, ColumnScheme::kDelta}) {
    for (unsigned bits : bits_choices) {
      for (unsigned zeros : {0u, 1u, 6u, 8u, 13u, 40u}) {
        std::vector<uint64_t> v(257);
        for (auto& x : v) {
          uint64_t r = bits == 64 ? rng() : rng() & ((uint64_t{1} << bits) - 1);
          if (s != ColumnScheme::kPlain && (rng() & 1)) r = ~r + 1;  // negative
          x = r << zeros;
        }
        if (s == ColumnScheme::kDelta) {  // v as cumulative times, wrapping mod 2^64
          uint64_t t = rng();
          for (auto& x : v) x = t += x;
        }
        const ByteBuf enc = Packed(s, v);
        INFO("scheme " << int(s) << " bits " << bits << " zeros " << zeros);
        CHECK(DecodeWhole(enc, static_cast<uint32_t>(v.size())).ints == v);
      }
    }
  }
  // INT64_MIN / max magnitudes through ZIGZAG with a shift.
  const std::vector<uint64_t> extremes = {I(INT64_MIN), I(-4096), 4096, I(INT64_MIN / 2)};
  CHECK(DecodeWhole(Packed(ColumnScheme::kZigZag, extremes), 4).ints == extremes);
}

TEST_CASE("format packed: a relative column is the differences from an earlier one") {
  const std::vector<uint64_t> fd = {7, 9, 7, 12};
  const std::vector<uint64_t> conn = {100, 102, 100, 105};
  ByteBuf enc;
  EncodePackedRelColumn(conn.data(), fd.data(), 1, conn.size(), &enc);
  // Scheme 8, W 1, reference column 1, shift 0, then zigzag(93) four times.
  CHECK(enc == ByteBuf{ColumnEncoding(ColumnScheme::kPackedRel, 1), 1, 0, 186, 186, 186, 186});
  std::vector<DecodedColumn> earlier(2);
  earlier[1].scheme = ColumnScheme::kPlain;
  earlier[1].ints = fd;
  ByteCursor c(enc.data(), enc.size());
  DecodedColumn col;
  std::string why;
  REQUIRE_MESSAGE(DecodeColumn(&c, 4, &col, &why, earlier.data(), 2), why);
  CHECK(col.ints == conn);
  // Differences of either sign, wrapping, with common zero bits.
  std::mt19937_64 rng(7);
  std::vector<uint64_t> a(300), b(300);
  for (size_t i = 0; i < a.size(); i++) {
    a[i] = rng();
    b[i] = a[i] + ((rng() % 1000) << 5) - (500 << 5);
  }
  ByteBuf e2;
  EncodePackedRelColumn(b.data(), a.data(), 0, b.size(), &e2);
  CHECK(e2[2] == 5);  // shift
  std::vector<DecodedColumn> ea(1);
  ea[0].scheme = ColumnScheme::kZigZag;
  ea[0].ints = a;
  ByteCursor c2(e2.data(), e2.size());
  REQUIRE_MESSAGE(DecodeColumn(&c2, 300, &col, &why, ea.data(), 1), why);
  CHECK(col.ints == b);
  // Refused: no such earlier column, a bytes column, or no columns given at all.
  ByteCursor c3(enc.data(), enc.size());
  CHECK_FALSE(DecodeColumn(&c3, 4, &col, &why, earlier.data(), 1));
  earlier[1].scheme = ColumnScheme::kBytes;
  ByteCursor c4(enc.data(), enc.size());
  CHECK_FALSE(DecodeColumn(&c4, 4, &col, &why, earlier.data(), 2));
  ByteCursor c5(enc.data(), enc.size());
  CHECK_FALSE(DecodeColumn(&c5, 4, &col, &why));
}

TEST_CASE("format packed: damaged columns are refused, never read past the end") {
  const std::vector<uint64_t> t = {5'000'000'000, 5'000'001'024, 5'000'002'048, 5'000'900'000};
  const ByteBuf enc = Packed(ColumnScheme::kDelta, t);
  CheckTruncationsRefused(enc, 4);
  ByteBuf bad_shift = enc;
  bad_shift[1] = 64;
  ByteCursor c(bad_shift.data(), bad_shift.size());
  DecodedColumn col;
  std::string why;
  CHECK_FALSE(DecodeColumn(&c, 4, &col, &why));
  CHECK(why.find("shift") != std::string::npos);
  const uint8_t unknown[] = {0x91, 0, 0};  // scheme 9
  ByteCursor c2(unknown, sizeof(unknown));
  CHECK_FALSE(DecodeColumn(&c2, 1, &col, &why));
}

// Also the cross-check sample for the Python decoder: with
// FLIGHTREC_PACKED_SAMPLE_OUT=DIR the segment is left at DIR/packed.seg
// (tests/integration/test_format_packed.py mirrors the values below).
TEST_CASE("format packed: a packed event type is written packed and read back exactly") {
  const char* keep = getenv("FLIGHTREC_PACKED_SAMPLE_OUT");
  const std::string dir = keep ? std::string(keep) : "/tmp/fr-format-packed-" + std::to_string(getpid());
  if (!keep) REQUIRE(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()) == 0);
  const std::string path = dir + "/packed.seg";
  SegmentWriter w;
  std::string error;
  REQUIRE_MESSAGE(w.Open(path, SegmentHeaderInfo{}, &error), error);
  EventTypeSpec spec{"x.op",
                     {{"time", FieldType::kTime, "ns"},
                      {"n", FieldType::kUInt, ""},
                      {"s", FieldType::kSInt, ""},
                      {"name", FieldType::kString, ""},
                      {"m", FieldType::kUInt, "", 1}},
                     true};
  const uint32_t id = w.DefineEventType(spec);
  REQUIRE(id != 0);
  std::vector<std::vector<uint64_t>> rows;
  for (uint64_t i = 0; i < 3000; i++) {
    const uint64_t time = 1'000'000'000 + i * 1984 + (i % 7) * 64;
    const uint64_t n = (i * 37 % 5000) << 4;
    const int64_t s = (i % 3 == 0) ? -static_cast<int64_t>(i) * 8 : static_cast<int64_t>(i) * 8;
    const uint64_t m = n + 3 + (i % 5 == 0);  // follows n
    flightrec::format::Value v[] = {Value::U(time), Value::U(n), Value::S(s), Value::Str(i % 2 ? "a" : "b"),
                                    Value::U(m)};
    w.Append(id, v, 5);
    rows.push_back({time, n, static_cast<uint64_t>(s), m});
  }
  REQUIRE_MESSAGE(w.Seal({}, &error), error);
  const Segment seg = ReadSegmentFile(path);
  CHECK(seg.problems.empty());
  CHECK(seg.has_footer);
  REQUIRE(seg.events.size() == rows.size());
  for (size_t i = 0; i < rows.size(); i++) {
    CHECK(seg.events[i].values[0].u == rows[i][0]);
    CHECK(seg.events[i].values[1].u == rows[i][1]);
    CHECK(seg.events[i].values[2].s == static_cast<int64_t>(rows[i][2]));
    CHECK(seg.events[i].values[4].u == rows[i][3]);
  }
  if (!keep) REQUIRE(system(("rm -rf " + dir).c_str()) == 0);
}
