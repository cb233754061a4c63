// SegmentReader: header parsing, block dispatch and payload decoding of one
// segment held in memory. Every payload is parsed into temporaries first and
// committed only if the whole block parses, so a damaged block leaves no
// half-applied state behind.
#include "format/segment_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>

#include <zstd.h>

#include "format/column_decoder.h"
#include "format/crc32c.h"
#include "format/framing.h"
#include "format/varint.h"

namespace flightrec::format {
namespace {

std::string At(uint64_t offset) { return " at offset " + std::to_string(offset); }

const char* KindName(uint16_t kind) {
  switch (static_cast<BlockKind>(kind)) {
    case BlockKind::kSchema: return "SCHEMA";
    case BlockKind::kStrings: return "STRINGS";
    case BlockKind::kMappings: return "MAPPINGS";
    case BlockKind::kLocations: return "LOCATIONS";
    case BlockKind::kStacks: return "STACKS";
    case BlockKind::kEvents: return "EVENTS";
    case BlockKind::kFooter: return "FOOTER";
  }
  return "unknown";
}

// Returns false and sets *why if the header is unusable; *truncated tells a
// header cut short by end of file apart from a corrupt one.
bool ParseHeader(const uint8_t* d, size_t n, SegmentHeader* h, std::string* why, bool* truncated) {
  *truncated = false;
  size_t m = n < sizeof(kSegmentMagic) ? n : sizeof(kSegmentMagic);
  if (n == 0 || std::memcmp(d, kSegmentMagic, m) != 0) {
    *why = n == 0 ? "empty file" : "not a flightrec segment (bad magic)";
    return false;
  }
  if (n < kHeaderFixedBytes) {
    *truncated = true;
    *why = "header cut short at " + std::to_string(n) + " bytes";
    return false;
  }
  h->version = static_cast<uint16_t>(LoadLE(d + 8, 2));
  if (h->version != kFramingVersion) {
    *why = "unsupported framing version " + std::to_string(h->version);
    return false;
  }
  h->header_len = static_cast<uint32_t>(LoadLE(d + 12, 4));
  if (h->header_len < kMinHeaderLen || h->header_len > kMaxHeaderLen) {
    *why = "corrupt header (header_len " + std::to_string(h->header_len) + ")";
    return false;
  }
  if (h->header_len > n) {
    *truncated = true;
    *why = "header cut short at " + std::to_string(n) + " of " + std::to_string(h->header_len) + " bytes";
    return false;
  }
  uint32_t crc = static_cast<uint32_t>(LoadLE(d + h->header_len - 4, 4));
  if (Crc32c(0, d, h->header_len - 4) != crc) {
    *why = "bad header CRC";
    return false;
  }
  h->pid = static_cast<uint32_t>(LoadLE(d + 16, 4));
  h->sequence = LoadLE(d + 24, 8);
  h->anchor_monotonic_ns = LoadLE(d + 32, 8);
  h->anchor_realtime_ns = LoadLE(d + 40, 8);
  // The strings must fit in [48, header_len - 4) (the CRC passed, so this only
  // fails for a header written wrongly, not one damaged later).
  size_t end = h->header_len - 4, p = kHeaderFixedBytes;
  for (std::string* s : {&h->service, &h->host}) {
    if (end - p < 2) {
      *why = "corrupt header (strings do not fit)";
      return false;
    }
    size_t len = static_cast<size_t>(LoadLE(d + p, 2));
    p += 2;
    if (len > end - p) {
      *why = "corrupt header (strings do not fit)";
      return false;
    }
    s->assign(reinterpret_cast<const char*>(d + p), len);
    p += len;
  }
  // Optional: the writer identity (u16 length, then at least its 32 bytes).
  // Anything else there is a future field and skipped.
  h->identity = WriterIdentity{};
  if (end - p >= 2) {
    const size_t len = static_cast<size_t>(LoadLE(d + p, 2));
    if (len >= kWriterIdentityBytes && len <= end - p - 2) {
      std::memcpy(h->identity.boot_id, d + p + 2, sizeof(h->identity.boot_id));
      h->identity.pid_ns = LoadLE(d + p + 18, 8);
      h->identity.start_ticks = LoadLE(d + p + 26, 8);
    }
  }
  return true;
}

class Decoder {
 public:
  Decoder(Segment* seg, const ReaderOptions& opt, size_t file_size)
      : seg_(seg),
        opt_(opt),
        table_left_(kTableBase + file_size),
        cells_left_(kSegmentCells + kCellsPerFileByte * file_size) {}
  ~Decoder() { ZSTD_freeDCtx(dctx_); }

  void Block(const RawBlock& b);

 private:
  bool Payload(const RawBlock& b, std::string* why);
  bool Schema(ByteCursor c, uint64_t offset, std::string* why);
  template <class T, class ParseEntry>
  bool Table(ByteCursor c, std::unordered_map<uint32_t, T>* table, ParseEntry parse, uint64_t offset, std::string* why);
  bool Events(ByteCursor c, uint64_t offset, std::string* why);
  bool Footer(ByteCursor c, std::string* why);

  Segment* seg_;
  const ReaderOptions& opt_;
  ZSTD_DCtx* dctx_ = nullptr;
  std::vector<uint8_t> raw_;
  bool warned_limit_ = false;
  uint64_t table_left_;       // table entries, frames and lines the segment may still define
  uint64_t cells_left_;       // event values the segment may still declare
  uint64_t deep_stacks_ = 0;  // stacks cut at kMaxStackDepth in the current block
};

void Decoder::Block(const RawBlock& b) {
  seg_->blocks_read++;
  if (b.flags & ~kKnownFlags) {
    seg_->unknown_blocks++;
    seg_->problems.push_back({b.offset, "unsupported block flags " + std::to_string(b.flags) + At(b.offset)});
    return;
  }
  if (b.kind < static_cast<uint16_t>(BlockKind::kSchema) || b.kind > static_cast<uint16_t>(BlockKind::kFooter)) {
    seg_->unknown_blocks++;
    seg_->problems.push_back({b.offset, "skipped block of unknown kind " + std::to_string(b.kind) + At(b.offset)});
    return;
  }
  if (seg_->has_footer)
    seg_->problems.push_back({b.offset, std::string(KindName(b.kind)) + " block after the footer" + At(b.offset)});
  std::string why;
  if (!Payload(b, &why)) {
    seg_->bad_blocks++;
    seg_->problems.push_back({b.offset, "bad " + std::string(KindName(b.kind)) + " block" + At(b.offset) + ": " + why});
  }
}

bool Decoder::Payload(const RawBlock& b, std::string* why) {
  const uint8_t* p = b.payload;
  size_t n = b.payload_len;
  if (b.flags & kFlagZstd) {
    // Check the frame's declared size before allocating for it.
    unsigned long long declared = ZSTD_getFrameContentSize(p, n);
    if (declared != b.raw_len) {
      *why = "zstd frame size does not match raw_len";
      return false;
    }
    if (!dctx_) dctx_ = ZSTD_createDCtx();
    if (!dctx_) {
      *why = "out of memory for zstd";
      return false;
    }
    raw_.resize(b.raw_len);
    size_t got = ZSTD_decompressDCtx(dctx_, raw_.data(), raw_.size(), p, n);
    if (ZSTD_isError(got) || got != b.raw_len) {
      *why = ZSTD_isError(got) ? std::string("zstd: ") + ZSTD_getErrorName(got) : "short zstd frame";
      return false;
    }
    p = raw_.data();
    n = raw_.size();
  }
  ByteCursor c(p, n);
  switch (static_cast<BlockKind>(b.kind)) {
    case BlockKind::kSchema: return Schema(c, b.offset, why);
    case BlockKind::kStrings:
      return Table(
          c, &seg_->strings,
          [](ByteCursor* c, std::string* s) {
            std::string_view v;
            if (!c->Str(&v)) return false;
            s->assign(v);
            return true;
          },
          b.offset, why);
    case BlockKind::kMappings:
      return Table(
          c, &seg_->mappings,
          [](ByteCursor* c, Mapping* m) {
            uint64_t path, build;
            if (!c->Uvarint(&m->start) || !c->Uvarint(&m->end) || !c->Uvarint(&m->file_offset) || !c->Uvarint(&path) ||
                !c->Uvarint(&build) || path > UINT32_MAX || build > UINT32_MAX)
              return false;
            m->path = static_cast<uint32_t>(path);
            m->build_id = static_cast<uint32_t>(build);
            return true;
          },
          b.offset, why);
    case BlockKind::kLocations:
      return Table(
          c, &seg_->locations,
          [this](ByteCursor* c, Location* l) {
            uint64_t mapping, nlines;
            if (!c->Uvarint(&mapping) || mapping > UINT32_MAX || !c->Uvarint(&l->address) || !c->Uvarint(&nlines))
              return false;
            if (nlines > c->remaining() / 3) return false;  // each line takes >= 3 bytes
            if (nlines > table_left_) return false;
            table_left_ -= nlines;
            l->mapping = static_cast<uint32_t>(mapping);
            l->lines.resize(static_cast<size_t>(nlines));
            for (Line& line : l->lines) {
              uint64_t fn, file;
              if (!c->Uvarint(&fn) || !c->Uvarint(&file) || !c->Uvarint(&line.line) || fn > UINT32_MAX ||
                  file > UINT32_MAX)
                return false;
              line.function = static_cast<uint32_t>(fn);
              line.file = static_cast<uint32_t>(file);
            }
            return true;
          },
          b.offset, why);
    case BlockKind::kStacks: {
      deep_stacks_ = 0;
      bool ok = Table(
          c, &seg_->stacks,
          [this](ByteCursor* c, std::vector<uint32_t>* s) {
            uint64_t n;
            if (!c->Uvarint(&n) || n > c->remaining()) return false;  // each frame takes >= 1 byte
            size_t keep = n > kMaxStackDepth ? kMaxStackDepth : static_cast<size_t>(n);
            if (keep > table_left_) return false;
            table_left_ -= keep;
            s->resize(keep);
            for (uint64_t i = 0; i < n; i++) {  // frames past kMaxStackDepth are read, not kept
              uint64_t v;
              if (!c->Uvarint(&v) || v > UINT32_MAX) return false;
              if (i < keep) (*s)[i] = static_cast<uint32_t>(v);
            }
            deep_stacks_ += n > keep;
            return true;
          },
          b.offset, why);
      if (ok && deep_stacks_)
        seg_->problems.push_back({b.offset, std::to_string(deep_stacks_) + " stacks deeper than " +
                                                std::to_string(kMaxStackDepth) + " frames" + At(b.offset) + " cut to " +
                                                std::to_string(kMaxStackDepth)});
      return ok;
    }
    case BlockKind::kEvents: return Events(c, b.offset, why);
    case BlockKind::kFooter: return Footer(c, why);
  }
  return true;  // unreachable: kinds were checked by the caller
}

bool Decoder::Schema(ByteCursor c, uint64_t offset, std::string* why) {
  uint64_t count;
  if (!c.Uvarint(&count) || count > c.remaining()) {
    *why = "bad type count";
    return false;
  }
  std::vector<SchemaType> defs;
  for (uint64_t i = 0; i < count; i++) {
    SchemaType t;
    uint64_t id, nfields;
    std::string_view name;
    if (!c.Uvarint(&id) || id == 0 || id > UINT32_MAX || !c.Str(&name) || !c.Uvarint(&nfields) || nfields == 0 ||
        nfields > kMaxSchemaFields) {
      *why = "bad type definition";
      return false;
    }
    t.id = static_cast<uint32_t>(id);
    t.name.assign(name);
    for (uint64_t f = 0; f < nfields; f++) {
      SchemaField field;
      std::string_view fname, unit;
      if (!c.Str(&fname) || !c.U8(&field.type_code) || !c.Str(&unit)) {
        *why = "bad field definition in type " + t.name;
        return false;
      }
      field.name.assign(fname);
      field.unit.assign(unit);
      t.fields.push_back(std::move(field));
    }
    defs.push_back(std::move(t));
  }
  for (SchemaType& t : defs) {
    if (t.fields[0].type_code != static_cast<uint8_t>(FieldType::kTime)) {
      seg_->problems.push_back({offset, "event type " + t.name + At(offset) + " ignored: field 0 is not a time"});
      continue;
    }
    auto it = seg_->schema.find(t.id);
    if (it == seg_->schema.end()) {
      seg_->schema.emplace(t.id, std::move(t));
    } else if (!(it->second == t)) {
      seg_->problems.push_back({offset, "conflicting redefinition of event type " + std::to_string(t.id) + " (" +
                                            t.name + ")" + At(offset) + "; kept the first"});
    }
  }
  return true;
}

template <class T, class ParseEntry>
bool Decoder::Table(ByteCursor c, std::unordered_map<uint32_t, T>* table, ParseEntry parse, uint64_t offset,
                    std::string* why) {
  uint64_t first, count;
  if (!c.Uvarint(&first) || !c.Uvarint(&count) || first == 0 || count > c.remaining() || first + count > (1ull << 32)) {
    *why = "bad table id range";
    return false;
  }
  if (count > table_left_) {
    *why = "table entries past what the segment may define";
    return false;
  }
  table_left_ -= count;
  std::vector<T> entries(static_cast<size_t>(count));
  for (T& e : entries) {
    if (!parse(&c, &e)) {
      *why = "bad table entry";
      return false;
    }
  }
  uint64_t dups = 0;
  for (uint64_t i = 0; i < count; i++)
    dups += !table->emplace(static_cast<uint32_t>(first + i), std::move(entries[i])).second;
  if (dups) seg_->problems.push_back({offset, std::to_string(dups) + " duplicate table ids" + At(offset) + " ignored"});
  return true;
}

// Which column schemes a field type may use (SPEC.md 5.4).
bool SchemeFits(uint8_t type_code, ColumnScheme s) {
  switch (static_cast<FieldType>(type_code)) {
    case FieldType::kTime:
    case FieldType::kUInt:
    case FieldType::kSInt:
    case FieldType::kString:
    case FieldType::kStack: return s == ColumnScheme::kPlain || s == ColumnScheme::kZigZag || s == ColumnScheme::kDelta;
    case FieldType::kF64: return s == ColumnScheme::kF64;
    case FieldType::kBytes: return s == ColumnScheme::kBytes;
  }
  return true;  // unknown type code: present whatever the column holds
}

bool Decoder::Events(ByteCursor c, uint64_t offset, std::string* why) {
  uint64_t type_id, count;
  if (!c.Uvarint(&type_id) || !c.Uvarint(&count) || count == 0 || count > kMaxEventsPerBlock) {
    *why = "bad event count";
    return false;
  }
  auto it = type_id > UINT32_MAX ? seg_->schema.end() : seg_->schema.find(static_cast<uint32_t>(type_id));
  if (it == seg_->schema.end()) {
    seg_->events_skipped += count;
    seg_->problems.push_back({offset, std::to_string(count) + " events of undefined type " + std::to_string(type_id) +
                                          At(offset) + " skipped (schema lost?)"});
    return true;
  }
  if (seg_->events.size() + count > opt_.max_events) {
    seg_->events_skipped += count;
    if (!warned_limit_)
      seg_->problems.push_back({offset, "event limit reached" + At(offset) + "; further events not decoded"});
    warned_limit_ = true;
    return true;
  }
  const SchemaType& t = it->second;
  uint64_t cells = count * t.fields.size();
  if (cells > kMaxBlockCells || cells > kCellSlack + kCellsPerByte * c.remaining() || cells > cells_left_) {
    *why = "more values (" + std::to_string(count) + " events x " + std::to_string(t.fields.size()) +
           " fields) than the block or segment may declare";
    return false;
  }
  cells_left_ -= cells;
  uint32_t n = static_cast<uint32_t>(count);
  std::vector<DecodedColumn> cols(t.fields.size());
  for (size_t f = 0; f < t.fields.size(); f++) {
    if (!DecodeColumn(&c, n, &cols[f], why, cols.data(), f)) {
      *why = "field " + t.fields[f].name + ": " + *why;
      return false;
    }
    if (!SchemeFits(t.fields[f].type_code, cols[f].scheme)) {
      *why = "field " + t.fields[f].name + ": column encoding does not fit its type";
      return false;
    }
  }
  size_t base = seg_->events.size();
  seg_->events.resize(base + n);
  for (uint32_t i = 0; i < n; i++) {
    Event& e = seg_->events[base + i];
    e.type_id = t.id;
    e.values.resize(t.fields.size());
    for (size_t f = 0; f < t.fields.size(); f++) {
      FieldValue& v = e.values[f];
      const DecodedColumn& col = cols[f];
      if (col.scheme == ColumnScheme::kBytes) {
        v.bytes.assign(col.bytes[i]);
      } else if (col.scheme == ColumnScheme::kF64) {
        v.u = col.ints[i];
        v.f = std::bit_cast<double>(col.ints[i]);
      } else {
        v.u = col.ints[i];
        v.s = static_cast<int64_t>(col.ints[i]);
      }
    }
  }
  return true;
}

bool Decoder::Footer(ByteCursor c, std::string* why) {
  uint64_t count;
  if (!c.Uvarint(&count) || count > c.remaining()) {
    *why = "bad footer count";
    return false;
  }
  std::vector<std::pair<std::string, uint64_t>> entries;
  for (uint64_t i = 0; i < count; i++) {
    std::string_view k;
    uint64_t v;
    if (!c.Str(&k) || !c.Uvarint(&v)) {
      *why = "bad footer entry";
      return false;
    }
    entries.emplace_back(std::string(k), v);
  }
  if (!seg_->has_footer) seg_->footer = std::move(entries);
  seg_->has_footer = true;
  return true;
}

}  // namespace

bool ReadSegmentHeader(const uint8_t* data, size_t size, SegmentHeader* header, std::string* why) {
  bool truncated = false;
  return ParseHeader(data, size, header, why, &truncated);
}

const char* SegmentStateName(SegmentState s) {
  switch (s) {
    case SegmentState::kInvalid: return "invalid";
    case SegmentState::kActive: return "active";
    case SegmentState::kSealed: return "sealed";
    case SegmentState::kTruncated: return "truncated";
  }
  return "invalid";
}

Segment ReadSegment(const uint8_t* data, size_t size, const ReaderOptions& options) {
  Segment seg;
  bool truncated;
  if (!ParseHeader(data, size, &seg.header, &seg.error, &truncated)) {
    seg.state = truncated ? SegmentState::kTruncated : SegmentState::kInvalid;
    seg.problems.push_back({0, seg.error});
    return seg;
  }
  BlockScanner scanner(data, size, seg.header.header_len);
  Decoder decoder(&seg, options, size);
  RawBlock b;
  while (scanner.Next(&b, &seg.problems)) decoder.Block(b);
  seg.bad_blocks += scanner.bad_blocks();
  if (scanner.truncated()) {
    seg.state = SegmentState::kTruncated;
    seg.truncated_at = scanner.truncated_at();
  } else {
    seg.state = seg.has_footer ? SegmentState::kSealed : SegmentState::kActive;
  }
  return seg;
}

Segment ReadSegmentFile(const std::string& path, const ReaderOptions& options) {
  Segment fail;
  fail.state = SegmentState::kInvalid;
  // Non-blocking, and regular files only: a FIFO would block the open or the
  // read forever, a device (/dev/zero) would never end.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    fail.error = path + ": " + std::strerror(errno);
    fail.problems.push_back({0, fail.error});
    return fail;
  }
  std::vector<uint8_t> buf;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    fail.error = path + ": not a regular file";
    fail.problems.push_back({0, fail.error});
    ::close(fd);
    return fail;
  }
  buf.reserve(static_cast<size_t>(st.st_size));
  uint8_t chunk[1 << 16];
  while (buf.size() < static_cast<size_t>(st.st_size)) {  // what the file held when opened
    ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      fail.error = path + ": " + std::strerror(errno);
      fail.problems.push_back({0, fail.error});
      ::close(fd);
      return fail;
    }
    if (n == 0) break;
    buf.insert(buf.end(), chunk, chunk + n);
  }
  ::close(fd);
  return ReadSegment(buf.data(), buf.size(), options);
}

const SchemaType* Segment::TypeByName(std::string_view name) const {
  for (const auto& [id, t] : schema)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<const Event*> Segment::EventsOf(std::string_view type_name) const {
  std::vector<const Event*> out;
  const SchemaType* t = TypeByName(type_name);
  if (!t) return out;
  for (const Event& e : events)
    if (e.type_id == t->id) out.push_back(&e);
  return out;
}

const std::string* Segment::String(uint32_t id) const {
  static const std::string kEmpty;
  if (id == 0) return &kEmpty;
  auto it = strings.find(id);
  return it == strings.end() ? nullptr : &it->second;
}

const std::vector<uint32_t>* Segment::Stack(uint32_t id) const {
  auto it = stacks.find(id);
  return it == stacks.end() ? nullptr : &it->second;
}

const Location* Segment::LocationById(uint32_t id) const {
  auto it = locations.find(id);
  return it == locations.end() ? nullptr : &it->second;
}

const Mapping* Segment::MappingById(uint32_t id) const {
  auto it = mappings.find(id);
  return it == mappings.end() ? nullptr : &it->second;
}

int Segment::FieldIndex(const SchemaType& t, std::string_view field) {
  for (size_t i = 0; i < t.fields.size(); i++)
    if (t.fields[i].name == field) return static_cast<int>(i);
  return -1;
}

std::optional<uint64_t> Segment::FooterValue(std::string_view key) const {
  for (const auto& [k, v] : footer)
    if (k == key) return v;
  return std::nullopt;
}

}  // namespace flightrec::format
