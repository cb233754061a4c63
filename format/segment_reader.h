// SegmentReader: a complete C++ decoder of one segment file (SPEC.md), for
// tests, fuzzing and tools. It knows only the framing and the field type
// codes; event types come from the segment's SCHEMA blocks.
//
// Robustness contract: any byte string is acceptable input. Parsing never
// crashes, never loops without consuming input, and allocates in proportion
// to the input (plus at most one 64 MiB block, and only for a zstd frame
// that declares that size); ReaderOptions::max_events bounds the decoded
// events. Damage is reported in problems(), never thrown.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "format/block_scanner.h"
#include "format/format_constants.h"
#include "format/framing.h"

namespace flightrec::format {

struct ReaderOptions {
  // Events past this many are counted but not decoded (a corrupt or hostile
  // file can declare ~1M events in a 30-byte block).
  uint64_t max_events = 1ull << 26;
};

enum class SegmentState {
  kInvalid,    // not a segment or unreadable header: nothing was read
  kActive,     // no footer; ends at a block boundary
  kSealed,     // footer present
  kTruncated,  // the last block (or the header) is cut short by end of file
};
const char* SegmentStateName(SegmentState s);

struct SegmentHeader {
  uint16_t version = 0;
  uint32_t header_len = 0;
  uint32_t pid = 0;
  uint64_t sequence = 0;
  uint64_t anchor_monotonic_ns = 0;
  uint64_t anchor_realtime_ns = 0;
  std::string service, host;
  WriterIdentity identity;  // all zero when the header carries none
};

// Parses the header at the start of data (SPEC.md 3), as ReadSegment does;
// false with *why when it is unusable or cut short.
bool ReadSegmentHeader(const uint8_t* data, size_t size, SegmentHeader* header, std::string* why);

struct SchemaField {
  std::string name;
  uint8_t type_code = 0;  // a FieldType value, or a code this reader does not know
  std::string unit;
  bool operator==(const SchemaField&) const = default;
};
struct SchemaType {
  uint32_t id = 0;
  std::string name;
  std::vector<SchemaField> fields;
  bool operator==(const SchemaType&) const = default;
};

// One decoded field. Integer types fill u (and s with the same bits), kF64
// fills f, kBytes fills bytes. kString/kStack hold the table id in u.
struct FieldValue {
  uint64_t u = 0;
  int64_t s = 0;
  double f = 0;
  std::string bytes;
};
struct Event {
  uint32_t type_id = 0;
  std::vector<FieldValue> values;  // one per schema field
};

struct Mapping {
  uint64_t start = 0, end = 0, file_offset = 0;
  uint32_t path = 0, build_id = 0;  // string ids
};
struct Line {
  uint32_t function = 0, file = 0;  // string ids
  uint64_t line = 0;
};
struct Location {
  uint32_t mapping = 0;
  uint64_t address = 0;
  std::vector<Line> lines;  // innermost first
};

struct Segment {
  SegmentState state = SegmentState::kInvalid;
  std::string error;  // why the header was rejected (state kInvalid / truncated header)
  SegmentHeader header;
  std::map<uint32_t, SchemaType> schema;
  std::unordered_map<uint32_t, std::string> strings;
  std::unordered_map<uint32_t, Mapping> mappings;
  std::unordered_map<uint32_t, Location> locations;
  std::unordered_map<uint32_t, std::vector<uint32_t>> stacks;  // location ids, leaf first
  std::vector<Event> events;                                   // in file order
  bool has_footer = false;
  std::vector<std::pair<std::string, uint64_t>> footer;
  std::vector<Problem> problems;
  uint64_t blocks_read = 0;     // good blocks, including skipped unknown kinds
  uint64_t bad_blocks = 0;      // failed framing/CRC, or payloads that did not parse
  uint64_t unknown_blocks = 0;  // unknown kind or unsupported flags, skipped
  uint64_t events_skipped = 0;  // beyond max_events, or of types without schema
  uint64_t truncated_at = 0;    // when state == kTruncated

  // Convenience lookups; nullptr / "" when absent.
  const SchemaType* TypeByName(std::string_view name) const;
  std::vector<const Event*> EventsOf(std::string_view type_name) const;
  const std::string* String(uint32_t id) const;
  const std::vector<uint32_t>* Stack(uint32_t id) const;
  const Location* LocationById(uint32_t id) const;
  const Mapping* MappingById(uint32_t id) const;
  // Index of a field in a type, or -1.
  static int FieldIndex(const SchemaType& t, std::string_view field);
  std::optional<uint64_t> FooterValue(std::string_view key) const;
};

Segment ReadSegment(const uint8_t* data, size_t size, const ReaderOptions& options = {});

// Reads a whole file into memory first. On I/O failure state is kInvalid and
// error names the file and errno text.
Segment ReadSegmentFile(const std::string& path, const ReaderOptions& options = {});

}  // namespace flightrec::format
