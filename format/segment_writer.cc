// SegmentWriter: buffers events per type, interns their strings and stacks,
// and writes header, SCHEMA, table, EVENTS and FOOTER blocks (SPEC.md).
//
// Invariant (ordering, SPEC.md 5.1): every output path goes through
// AppendPendingDefinitions() before any EVENTS block, so schemas and intern
// entries always precede the events that use them.
#include "format/segment_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "format/block_encoder.h"
#include "format/column_encoder.h"
#include "format/crc32c.h"
#include "format/framing.h"
#include "format/fsize_guard.h"
#include "format/intern_tables.h"
#include "format/mi_containers.h"
#include "format/own_fds.h"
#include "format/varint.h"

namespace flightrec::format {
namespace {

constexpr size_t kBatchFlushBytes = 256 * 1024;  // auto-flush a type's batch past this
constexpr uint32_t kBatchMaxEvents = 65536;      // and never put more in one EVENTS block
constexpr size_t kMaxHeaderString = 4096;
constexpr uint32_t kKeptBatchRows = 256;  // a batch array this small is always kept
// A type's first batch array: 16 rows of a 20-field type with the stride's
// padding is 3,840 bytes, under the 4 KiB where mimalloc's first block of a
// size class sets up four blocks (four pages) instead of one page. Most
// types hold a few events per batch (issue #39: a short-lived process).
constexpr uint32_t kFirstBatchRows = 16;

// A batch's column array: uninitialised memory from the recorder's heap
// (mi_malloc), owned, movable (a vector of types moves its elements).
class ColumnStore {
 public:
  ColumnStore() = default;
  ColumnStore(const ColumnStore&) = delete;
  ColumnStore& operator=(const ColumnStore&) = delete;
  ColumnStore(ColumnStore&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  ColumnStore& operator=(ColumnStore&& o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~ColumnStore() { mi_free(p_); }
  // False (nothing changed) if the memory cannot be had.
  bool Allocate(size_t n) {
    auto* p = static_cast<uint64_t*>(mi_malloc(n * sizeof(uint64_t)));
    if (!p) return false;
    mi_free(p_);
    p_ = p;
    return true;
  }
  void Release() {
    mi_free(p_);
    p_ = nullptr;
  }
  uint64_t* data() const { return p_; }

 private:
  uint64_t* p_ = nullptr;
};

// Elements allocated one by one from the recorder's heap and reached
// through a vector of pointers: they never move, and each is a small block.
// (The writer's ~50 event types in one vector made a 12 KB block, and
// mimalloc's first block of a size class that large sets up a free list
// through four blocks: four page faults, in every process at start.)
template <typename T>
class PointerList {
 public:
  PointerList() = default;
  PointerList(const PointerList&) = delete;
  PointerList& operator=(const PointerList&) = delete;
  ~PointerList() {
    for (T* p : items_) {
      p->~T();
      mi_free(p);
    }
  }
  size_t size() const { return items_.size(); }
  void reserve(size_t n) { items_.reserve(n); }
  T& operator[](size_t i) const { return *items_[i]; }
  void push_back(T&& v) {
    items_.reserve(items_.size() + 1);  // may throw: nothing allocated yet
    void* mem = mi_malloc(sizeof(T));
    if (!mem) throw std::bad_alloc();
    items_.push_back(new (mem) T(std::move(v)));
  }
  struct iterator {
    T* const* p;
    T& operator*() const { return **p; }
    iterator& operator++() {
      ++p;
      return *this;
    }
    bool operator!=(const iterator& o) const { return p != o.p; }
  };
  iterator begin() const { return {items_.data()}; }
  iterator end() const { return {items_.data() + items_.size()}; }

 private:
  MiVector<T*> items_;
};

bool IsIntegerField(FieldType t) {
  return t == FieldType::kTime || t == FieldType::kUInt || t == FieldType::kSInt || t == FieldType::kString ||
         t == FieldType::kStack;
}
// Fields written with the plain scheme (kUInt, kString, kStack) can follow another.
bool CanFollow(FieldType t) { return t == FieldType::kUInt || t == FieldType::kString || t == FieldType::kStack; }

std::string_view TruncateUtf8(std::string_view s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<uint8_t>(s[n]) & 0xC0) == 0x80) n--;
  return s.substr(0, n);
}

std::string ErrnoText(const char* what, const std::string& path, int err) {
  std::string s = what;
  s += ' ';
  s += path;
  s += ": ";
  s += std::strerror(err);
  return s;
}

}  // namespace

int SegmentFileAccess::Open(const std::string& name, int flags, unsigned mode) {
  const int fd = ::openat(AT_FDCWD, name.c_str(), flags, static_cast<mode_t>(mode));
  return MoveToOwnFdRange(fd);  // not onto a closed stdout, nor a low number the program picks
}
void SegmentFileAccess::Close(int fd) { ::close(fd); }
void SegmentFileAccess::Unlink(const std::string& name) { ::unlinkat(AT_FDCWD, name.c_str(), 0); }

struct SegmentWriter::Impl {
  struct Field {
    MiString name, unit;
    FieldType type;
    int follows = -1;     // FieldSpec::follows, checked at definition
    uint32_t recent = 0;  // kString: its cache in Type::recent
  };
  struct Type {
    MiString name;
    MiVector<Field> fields;
    bool packed = false;  // EventTypeSpec::packed
    // Definitions in the current segment: each type is defined twice (SPEC.md
    // 5.3), the copy at a later write than the first, so one damaged SCHEMA
    // block cannot leave the segment's events of the type undecodable.
    uint8_t schema_copies = 0;
    uint64_t schema_round = 0;  // the definitions round of the first copy
    // Events of this type in `out`, written to this segment's file, and lost
    // (never written: a write failed or the segment was dropped with them
    // still buffered) since the owner last took the count.
    uint64_t in_out = 0, written = 0, lost = 0;
    // The batch: column-major raw values (see Append for what each holds),
    // all columns in one array: column f at f * stride, `cap` slots each,
    // the first `count` used. An event is stored with one store per field,
    // not a push_back (a capacity check and a size update) per field. The
    // stride is cap plus one cache line: with a column per allocation (or a
    // power-of-two stride) every column's slot of one event fell in the same
    // L1 set (16 KiB arrays, page aligned), and a socket.exchange's 20 stores
    // evicted each other (flush_socket_bench).
    //
    // The array is not zero-filled: every Append writes every field of its
    // row, and only rows below `count` are read. So only the pages rows were
    // written to become resident: a zero-filled 1,024-row socket.exchange
    // array was 165 KiB resident in every PostgreSQL backend whatever its
    // batches held (issue #44).
    uint32_t count = 0;
    uint32_t cap = 0;
    size_t stride = 0;
    size_t raw_bytes = 0;
    ColumnStore cols;
    uint64_t* col(size_t f) { return cols.data() + f * stride; }
    MiVector<MiVector<uint8_t>> bytes;  // concatenated kBytes values, per field (empty without a kBytes field)
    MiVector<RecentStrings> recent;     // one per kString field
    bool columns_only = true;           // no kBytes/kStack field: AppendColumns accepts it
  };

  PointerList<Type> types;  // type id = index + 1; persists across segments
  InternTables tables;
  BlockEncoder blocks;

  SegmentFileAccess default_access;
  SegmentFileAccess* access = &default_access;
  bool open = false;  // between Open and Seal/Abandon
  int fd = -1;        // only while a write is in progress
  std::string path;
  bool failed = false;  // a write failed: only Seal/Abandon remain useful
  std::string fail_error;
  bool deferred = false;  // the last write found no descriptor free: `out` waits
  std::string deferred_error;
  bool vanished = false;  // a write found the file gone

  // Per-segment counters.
  WriterStats stats;
  uint64_t events_appended = 0;
  uint64_t min_time = UINT64_MAX, max_time = 0;
  uint64_t rejected = 0;

  uint64_t definitions_round = 0;      // AppendPendingDefinitions calls (one per write)
  uint64_t segment_first_round = 0;    // the round of the open segment's first write
  MiVector<uint8_t> out;               // blocks waiting for one write()
  uint64_t pending_events_in_out = 0;  // events inside `out`, not yet written
  MiVector<uint8_t> payload;           // scratch for one block's raw payload

  // Drops the segment's intern tables and unwritten batches (after Seal or
  // Abandon, and before Open). Stats survive until the next Open so the
  // caller can read the final size of a sealed segment.
  void ReleaseSegmentMemory() {
    tables.Reset();
    for (Type& t : types) {
      t.schema_copies = 0;
      t.lost += t.count + t.in_out;  // nothing left to write them to
      t.in_out = 0;
      ClearBatch(&t);
    }
    out.clear();
    pending_events_in_out = 0;
  }

  void ResetSegmentState() {
    ReleaseSegmentMemory();
    stats = WriterStats{};
    events_appended = 0;
    for (Type& t : types) t.written = 0;
    min_time = UINT64_MAX;
    max_time = 0;
    rejected = 0;
    failed = false;
    fail_error.clear();
    deferred = false;
    vanished = false;
    segment_first_round = definitions_round + 1;
  }

  // Bookkeeping after an event of type_id (time: its first field) went into
  // the batch, with raw_bytes of column values.
  void Appended(uint32_t type_id, uint64_t time, size_t raw_bytes) {
    Type& t = types[type_id - 1];
    t.raw_bytes += raw_bytes;
    t.count++;
    min_time = time < min_time ? time : min_time;
    max_time = time > max_time ? time : max_time;
    events_appended++;
    stats.first_time_ns = min_time;
    stats.last_time_ns = max_time;
    if (t.raw_bytes >= kBatchFlushBytes || t.count >= kBatchMaxEvents) FlushOne(type_id);
  }

  static void ClearBatch(Type* t) {
    // A batch that used under a quarter of what a burst grew it to gives the
    // memory back; the next one grows again by doubling from kFirstBatchRows.
    if (t->cap > kKeptBatchRows && static_cast<uint64_t>(t->count) * 4 < t->cap) {
      t->cols.Release();
      t->cap = 0;
      t->stride = 0;
    }
    t->count = 0;
    t->raw_bytes = 0;
    for (auto& b : t->bytes) b.clear();
  }

  // Room for one more event in every column of t's batch (count < cap after).
  // Doubling stops at the most events a batch can hold before Appended
  // flushes it (each event puts at least 8 bytes per field into raw_bytes):
  // a busy socket.exchange batch (20 fields) needs 1,639 slots, and the
  // doubling to 2,048 left 64 KiB of every busy process's heap unused
  // (issue #44).
  static void ReserveRow(Type* t) {
    if (t->count < t->cap) return;
    const size_t row_bytes = 8 * std::max<size_t>(1, t->fields.size());
    const uint32_t most =
        static_cast<uint32_t>(std::min<size_t>(kBatchMaxEvents, (kBatchFlushBytes + row_bytes - 1) / row_bytes));
    const uint32_t cap = std::max(
        t->count + 1, std::min(t->cap ? 2 * t->cap : kFirstBatchRows, std::max<uint32_t>(most, kFirstBatchRows)));
    const size_t stride = cap + 64 / sizeof(uint64_t);
    ColumnStore grown;
    if (!grown.Allocate(std::max<size_t>(1, stride * t->fields.size()))) throw std::bad_alloc();
    // The first reservation has no columns yet (cols.data() is null: memcpy
    // from it is undefined even for 0 bytes).
    if (t->count > 0)
      for (size_t f = 0; f < t->fields.size(); f++)
        std::memcpy(grown.data() + f * stride, t->col(f), t->count * sizeof(uint64_t));
    t->cols = std::move(grown);
    t->cap = cap;
    t->stride = stride;
  }

  void AddBlock(BlockKind kind, const uint8_t* p, size_t n) { blocks.Append(kind, p, n, &out); }

  // A type's definition is due if it has events waiting and was never
  // written in this segment, or was written once at an earlier round (its
  // second copy). A type without events in the segment is not defined in
  // it: a short-lived process's segment then carries the few types it used,
  // not all ~50, and its SCHEMA block stays too small to be worth zstd's
  // context (issue #39: what a short-lived process pays).
  bool SchemaDue(const Type& t) const {
    if (t.schema_copies == 0) return t.count > 0;
    return t.schema_copies == 1 && t.schema_round != definitions_round;
  }

  // One SCHEMA block defining every type `due(t)` selects (none: no block).
  template <typename Due>
  void AppendSchemaBlock(Due due) {
    payload.clear();
    uint32_t n = 0;
    for (const Type& t : types) n += due(t);
    if (!n) return;
    PutUvarint(&payload, n);
    for (size_t i = 0; i < types.size(); i++) {
      Type& t = types[i];
      if (!due(t)) continue;
      PutUvarint(&payload, i + 1);
      PutStr(&payload, t.name);
      PutUvarint(&payload, t.fields.size());
      for (const Field& f : t.fields) {
        PutStr(&payload, f.name);
        payload.push_back(static_cast<uint8_t>(f.type));
        PutStr(&payload, f.unit);
      }
      if (t.schema_copies++ == 0) t.schema_round = definitions_round;
    }
    AddBlock(BlockKind::kSchema, payload.data(), payload.size());
  }

  // New schemas (and second copies), then new intern entries (strings,
  // mappings, locations, stacks).
  void AppendPendingDefinitions() {
    definitions_round++;
    AppendSchemaBlock([this](const Type& t) { return SchemaDue(t); });
    tables.EmitPending([this](BlockKind kind, const uint8_t* p, size_t n) {
      AddBlock(kind, p, n);
      return true;
    });
  }

  // At the seal of a segment written more than once: the second copy of
  // each type first defined in this last write, in a block after its events
  // (readers keep such events until a later definition, SPEC.md 5.3). Before
  // types were defined only with events, every type had its copies in the
  // first two writes; this keeps "one damaged SCHEMA block loses no event"
  // for the types that first appear at the end (thread.end, socket.close).
  // A segment sealed at its first write keeps one copy, as before.
  void AppendSecondCopiesAtSeal() {
    if (definitions_round <= segment_first_round) return;
    AppendSchemaBlock([this](const Type& t) { return t.schema_copies == 1 && t.schema_round == definitions_round; });
  }

  void AppendEventsBlock(uint32_t type_id) {
    Type& t = types[type_id - 1];
    if (t.count == 0) return;
    payload.clear();
    PutUvarint(&payload, type_id);
    PutUvarint(&payload, t.count);
    for (size_t f = 0; f < t.fields.size(); f++) {
      const uint64_t* v = t.col(f);
      switch (t.fields[f].type) {
        case FieldType::kTime:
          if (t.packed) EncodePackedColumn(ColumnScheme::kDelta, v, t.count, &payload);
          else EncodeDeltaColumn(v, t.count, &payload);
          break;
        case FieldType::kSInt:
          if (t.packed) EncodePackedColumn(ColumnScheme::kZigZag, v, t.count, &payload);
          else EncodeZigZagColumn(v, t.count, &payload);
          break;
        case FieldType::kF64: EncodeF64Column(v, t.count, &payload); break;
        case FieldType::kBytes: EncodeBytesColumn(v, t.count, t.bytes[f].data(), t.bytes[f].size(), &payload); break;
        case FieldType::kUInt:
        case FieldType::kString:
        case FieldType::kStack:
          if (t.fields[f].follows >= 0) {
            EncodePackedRelColumn(v, t.col(t.fields[f].follows), static_cast<uint8_t>(t.fields[f].follows), t.count,
                                  &payload);
          } else if (t.packed) {
            EncodePackedUIntColumn(v, t.count, &payload);
          } else {
            EncodePlainColumn(v, t.count, &payload);
          }
          break;
      }
    }
    AddBlock(BlockKind::kEvents, payload.data(), payload.size());
    pending_events_in_out += t.count;
    t.in_out += t.count;
    ClearBatch(&t);
  }

  // Writes `out` through a descriptor of its own, opened for this write only
  // (SegmentWriter: no descriptor is held between writes). With no
  // descriptor free, `out` waits for the next write (write_deferred());
  // returns false only on a failure.
  // A write that would take the file past RLIMIT_FSIZE is not attempted,
  // and none raises SIGXFSZ (fsize_guard.h): the program would die of it.
  bool WriteOut() {
    if (failed) return false;
    if (out.empty()) return true;
    const uint64_t limit = FileSizeLimit();
    if (stats.bytes_written + out.size() > limit) {
      Fail("write " + path + ": the file would pass RLIMIT_FSIZE (" + std::to_string(limit) + " bytes)");
      return false;
    }
    const int f = access->Open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (f < 0) {
      const int err = errno;
      if ((err == EMFILE || err == ENFILE) && out.size() <= kMaxDeferredBytes) {
        deferred = true;
        deferred_error = ErrnoText("open", path, err);
        return true;
      }
      if (err == ENOENT) vanished = true;
      Fail(ErrnoText("open", path, err));
      return false;
    }
    fd = f;
    const bool ok = WriteOutToFd();
    if (fd >= 0) access->Close(fd);
    fd = -1;
    return ok;
  }

  // Writes `out` to fd at the file's known end with pwrite(2): retries EINTR
  // and short writes. A descriptor the program took over (dup2) is neither
  // written nor closed (fd becomes -1).
  bool WriteOutToFd() {
    size_t off = 0;
    while (off < out.size()) {
      if (access->Lost(fd)) {
        fd = -1;
        Fail("write " + path + ": the application took over the segment's descriptor (dup2)");
        return false;
      }
      ssize_t n =
          PwriteWithoutSigxfsz(fd, out.data() + off, out.size() - off, static_cast<off_t>(stats.bytes_written + off));
      if (n < 0) {
        if (errno == EINTR) continue;
        Fail(ErrnoText("write", path, errno));
        return false;
      }
      if (n == 0) {  // should not happen for regular files; do not spin
        Fail("write " + path + ": wrote 0 bytes");
        return false;
      }
      off += static_cast<size_t>(n);
    }
    deferred = false;
    stats.bytes_written += out.size();
    stats.events_written += pending_events_in_out;
    pending_events_in_out = 0;
    for (Type& t : types) {
      t.written += t.in_out;
      t.in_out = 0;
    }
    out.clear();
    return true;
  }

  // Cuts the file back to its last whole write, so it holds exactly the
  // events counted as written; everything in `out` is lost.
  void Fail(std::string e) {
    failed = true;
    fail_error = std::move(e);
    if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(stats.bytes_written)) != 0) {
      // Rare (the descriptor is writable): whole blocks of the failed write
      // may then stay readable although counted as lost.
    }
    out.clear();
    pending_events_in_out = 0;
    for (Type& t : types) {
      t.lost += t.in_out;
      t.in_out = 0;
    }
  }

  bool FlushAll() {
    if (failed) return false;
    AppendPendingDefinitions();
    for (uint32_t id = 1; id <= types.size(); id++) AppendEventsBlock(id);
    return WriteOut();
  }

  // Auto-flush of one full batch from Append. A failure is remembered and
  // reported by the next Flush/Seal (Append has no way to return it).
  void FlushOne(uint32_t type_id) {
    if (failed) {
      Type& t = types[type_id - 1];
      t.lost += t.count;
      ClearBatch(&t);  // nowhere to go; keep memory bounded
      return;
    }
    AppendPendingDefinitions();
    AppendEventsBlock(type_id);
    // The block joins what the next Flush writes (the flush thread's, every
    // 250 ms), unless enough waits already: one open, pwrite and close per
    // 64 KiB instead of per block. A busy redis fills a socket.exchange
    // batch ~50 times a second, and each write is ~10 system calls (the
    // file is reopened per write, and SIGXFSZ is held off around it).
    if (out.size() >= kWriteOutBytes) WriteOut();
  }

  static constexpr size_t kMaxDeferredBytes = SegmentWriter::kMaxDeferredBytes;
  static constexpr size_t kWriteOutBytes = 64 * 1024;
  // `out` and `payload` at Open: under 4 KiB, where mimalloc's first block
  // of a size class sets up one page, not four blocks (four pages).
  static constexpr size_t kFirstBufferBytes = 2048;
};

SegmentWriter::SegmentWriter() : impl_(std::make_unique<Impl>()), string_epoch_(impl_->tables.epoch_address()) {}

SegmentWriter::~SegmentWriter() { Abandon(); }

void SegmentWriter::SetPcDescriber(PcDescriber* describer) { impl_->tables.SetPcDescriber(describer); }

void SegmentWriter::SetFileAccess(SegmentFileAccess* access) {
  impl_->access = access ? access : &impl_->default_access;
}

bool SegmentWriter::is_open() const { return impl_->open; }
int SegmentWriter::fd() const { return impl_->fd; }
bool SegmentWriter::write_deferred() const { return impl_->deferred; }
bool SegmentWriter::file_vanished() const { return impl_->vanished; }

void SegmentWriter::Touch() {
  Impl& m = *impl_;
  if (!m.open || m.failed) return;
  const int f = m.access->Open(m.path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0);
  if (f < 0) return;  // the next write reports what is wrong
  m.fd = f;
  if (!m.access->Lost(f)) {
    ::futimens(f, nullptr);
    m.access->Close(f);
  }
  m.fd = -1;
}

bool SegmentWriter::Open(const std::string& path, const SegmentHeaderInfo& header, std::string* error) {
  Impl& m = *impl_;
  if (m.open) {
    if (error) *error = "open " + path + ": writer already has " + m.path + " open";
    return false;
  }
  m.ResetSegmentState();
  m.path = path;

  std::string_view service = TruncateUtf8(header.service, kMaxHeaderString);
  std::string_view host = TruncateUtf8(header.host, kMaxHeaderString);
  MiVector<uint8_t>& h = m.out;
  h.clear();
  // One allocation each instead of a doubling per block size on the way up
  // (each in a fresh mimalloc size-class page: a page fault apiece).
  if (h.capacity() < Impl::kFirstBufferBytes) h.reserve(Impl::kFirstBufferBytes);
  if (m.payload.capacity() < Impl::kFirstBufferBytes) m.payload.reserve(Impl::kFirstBufferBytes);
  PutBytes(&h, kSegmentMagic, sizeof(kSegmentMagic));
  PutFixed(&h, kFramingVersion, 2);
  PutFixed(&h, 0, 2);
  uint32_t header_len = kHeaderFixedBytes + 2 + service.size() + 2 + host.size() + 4;
  if (header.identity.known()) header_len += 2 + kWriterIdentityBytes;
  PutFixed(&h, header_len, 4);
  PutFixed(&h, header.pid, 4);
  PutFixed(&h, 0, 4);
  PutFixed(&h, header.sequence, 8);
  PutFixed(&h, header.anchor_monotonic_ns, 8);
  PutFixed(&h, header.anchor_realtime_ns, 8);
  PutFixed(&h, service.size(), 2);
  PutBytes(&h, service.data(), service.size());
  PutFixed(&h, host.size(), 2);
  PutBytes(&h, host.data(), host.size());
  if (header.identity.known()) {  // SPEC.md 3: the writer identity
    PutFixed(&h, kWriterIdentityBytes, 2);
    PutBytes(&h, header.identity.boot_id, sizeof(header.identity.boot_id));
    PutFixed(&h, header.identity.pid_ns, 8);
    PutFixed(&h, header.identity.start_ticks, 8);
  }
  PutFixed(&h, Crc32c(0, h.data(), h.size()), 4);
  const int fd = m.access->Open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (error) *error = ErrnoText("open", path, errno);
    h.clear();
    return false;
  }
  m.fd = fd;
  const bool ok = m.WriteOutToFd();
  if (m.fd >= 0) m.access->Close(m.fd);
  m.fd = -1;
  if (!ok) {
    if (error) *error = m.fail_error;
    // Created here (O_EXCL) and empty: a full disk must not collect one such
    // file per attempt.
    m.access->Unlink(path);
    return false;
  }
  m.open = true;
  return true;
}

uint32_t SegmentWriter::DefineEventType(const EventTypeSpec& spec) {
  Impl& m = *impl_;
  // Refused (id 0, whose events are then rejected): no fields, too many, a
  // first field that is not {"time", kTime}, an unknown type code, a field
  // named "type" (decoders use that key for the type name), or a duplicate
  // field name (SPEC.md 5.3).
  if (spec.name.empty() || spec.fields.empty() || spec.fields.size() > kMaxSchemaFields ||
      spec.fields[0].type != FieldType::kTime || spec.fields[0].name != "time")
    return 0;
  for (size_t i = 0; i < spec.fields.size(); i++) {
    const FieldSpec& f = spec.fields[i];
    if (static_cast<uint8_t>(f.type) < 1 || static_cast<uint8_t>(f.type) > 7 || f.name.empty() || f.name == "type")
      return 0;
    for (size_t j = 0; j < i; j++)
      if (spec.fields[j].name == f.name) return 0;
  }
  // The same name again: the same id if identical, refused if different
  // (two layouts under one name would be ambiguous to every reader).
  for (size_t i = 0; i < m.types.size(); i++) {
    const Impl::Type& t = m.types[i];
    if (std::string_view(t.name) != spec.name) continue;
    bool same = t.fields.size() == spec.fields.size();
    for (size_t f = 0; same && f < t.fields.size(); f++)
      same = std::string_view(t.fields[f].name) == spec.fields[f].name && t.fields[f].type == spec.fields[f].type &&
             std::string_view(t.fields[f].unit) == spec.fields[f].unit;
    return same ? static_cast<uint32_t>(i + 1) : 0;
  }
  // Sized once, not grown by doubling: each doubling lands in another of
  // mimalloc's size classes, a fresh page and a page fault, and a process
  // defines ~50 types at start (issue #39: what a short-lived process pays).
  if (m.types.size() == 0) m.types.reserve(64);
  Impl::Type t;
  t.name = MiString(spec.name);
  t.packed = spec.packed;
  t.fields.reserve(spec.fields.size());
  size_t strings = 0;
  bool has_bytes = false;
  for (const FieldSpec& f : spec.fields) {
    strings += f.type == FieldType::kString;
    has_bytes |= f.type == FieldType::kBytes;
  }
  t.recent.reserve(strings);
  for (size_t i = 0; i < spec.fields.size(); i++) {
    const FieldSpec& f = spec.fields[i];
    // Only an earlier integer field can be followed (readers decode in order).
    const bool ok = spec.packed && f.follows >= 0 && static_cast<size_t>(f.follows) < i && CanFollow(f.type) &&
                    IsIntegerField(spec.fields[f.follows].type);
    t.fields.push_back(
        {MiString(f.name), MiString(f.unit), f.type, ok ? f.follows : -1, static_cast<uint32_t>(t.recent.size())});
    if (f.type == FieldType::kString) t.recent.emplace_back();
    if (f.type == FieldType::kBytes || f.type == FieldType::kStack) t.columns_only = false;
  }
  if (has_bytes) t.bytes.resize(t.fields.size());  // indexed by field; only kBytes fields use theirs
  m.types.push_back(std::move(t));
  return static_cast<uint32_t>(m.types.size());
}

void SegmentWriter::Append(uint32_t type_id, const Value* values, size_t nvalues) {
  Impl& m = *impl_;
  if (!m.open || type_id == 0 || type_id > m.types.size() || values == nullptr ||
      nvalues != m.types[type_id - 1].fields.size()) {
    m.rejected++;
    return;
  }
  Impl::Type& t = m.types[type_id - 1];
  Impl::ReserveRow(&t);
  for (size_t f = 0; f < nvalues; f++) {
    const Value& v = values[f];
    uint64_t x = 0;
    switch (t.fields[f].type) {
      case FieldType::kTime:
      case FieldType::kUInt: x = v.u; break;
      case FieldType::kSInt: x = static_cast<uint64_t>(v.s); break;
      case FieldType::kF64: x = std::bit_cast<uint64_t>(v.f); break;
      case FieldType::kString: x = m.tables.String(v.bytes, &t.recent[t.fields[f].recent]); break;
      case FieldType::kStack:
        // The event's own time, when it leads (every event type with a stack).
        x = m.tables.Stack(v.pcs, v.npcs, t.fields[0].type == FieldType::kTime ? values[0].u : 0);
        break;
      case FieldType::kBytes: {
        size_t n = v.bytes.size() < kMaxValueBytes ? v.bytes.size() : kMaxValueBytes;
        PutBytes(&t.bytes[f], v.bytes.data(), n);
        t.raw_bytes += n;
        x = n;
        break;
      }
    }
    t.col(f)[t.count] = x;
  }
  m.Appended(type_id, values[0].u, 8 * nvalues);
}

void SegmentWriter::AppendColumns(uint32_t type_id, const uint64_t* column, size_t ncolumns) {
  Impl& m = *impl_;
  if (!m.open || type_id == 0 || type_id > m.types.size() || column == nullptr ||
      ncolumns != m.types[type_id - 1].fields.size() || !m.types[type_id - 1].columns_only) {
    m.rejected++;
    return;
  }
  Impl::Type& t = m.types[type_id - 1];
  Impl::ReserveRow(&t);
  uint64_t* slot = t.cols.data() + t.count;
  for (size_t f = 0; f < ncolumns; f++, slot += t.stride) *slot = column[f];
  m.Appended(type_id, column[0], 8 * ncolumns);
}

uint32_t SegmentWriter::StringId(std::string_view s) { return impl_->tables.String(s); }

bool SegmentWriter::Flush(std::string* error) {
  Impl& m = *impl_;
  if (!m.open) {
    if (error) *error = "flush: no segment open";
    return false;
  }
  if (!m.FlushAll()) {
    if (error) *error = m.fail_error;
    return false;
  }
  return true;
}

bool SegmentWriter::Seal(const std::vector<std::pair<std::string, uint64_t>>& footer_counters, std::string* error) {
  Impl& m = *impl_;
  if (!m.open) {
    if (error) *error = "seal: no segment open";
    return false;
  }
  bool ok = m.FlushAll();
  if (ok) {
    m.AppendSecondCopiesAtSeal();
    MiVector<uint8_t>& p = m.payload;
    p.clear();
    uint64_t n = 3 + (m.rejected ? 1 : 0) + footer_counters.size();
    PutUvarint(&p, n);
    auto put = [&p](std::string_view k, uint64_t v) {
      PutStr(&p, k);
      PutUvarint(&p, v);
    };
    put("events", m.events_appended);
    put("first_time_ns", m.events_appended ? m.min_time : 0);
    put("last_time_ns", m.events_appended ? m.max_time : 0);
    if (m.rejected) put("writer.rejected", m.rejected);
    for (const auto& [k, v] : footer_counters) put(k, v);
    m.AddBlock(BlockKind::kFooter, p.data(), p.size());
    ok = m.WriteOut();
    // No descriptor free even now: the footer (and what waited) is lost,
    // counted by ReleaseSegmentMemory; the file reads up to its last write.
    if (ok && m.deferred) {
      ok = false;
      m.fail_error = m.deferred_error;
    }
  }
  if (!ok && error) *error = m.fail_error;
  m.open = false;
  m.ReleaseSegmentMemory();  // give intern memory back between segments
  return ok;
}

void SegmentWriter::Abandon() {
  Impl& m = *impl_;
  m.open = false;
  m.ReleaseSegmentMemory();
}

void SegmentWriter::LoseWrittenEvents() {
  for (Impl::Type& t : impl_->types) {
    t.lost += t.written;
    t.written = 0;
  }
}

std::vector<std::pair<std::string, uint64_t>> SegmentWriter::TakeLostEvents() {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (Impl::Type& t : impl_->types) {
    if (!t.lost) continue;
    out.emplace_back(std::string(t.name.data(), t.name.size()), t.lost);
    t.lost = 0;
  }
  return out;
}

WriterStats SegmentWriter::stats() const { return impl_->stats; }

uint32_t SegmentWriter::batch_capacity(uint32_t type_id) const {
  return type_id == 0 || type_id > impl_->types.size() ? 0 : impl_->types[type_id - 1].cap;
}

uint64_t SegmentWriter::buffered_bytes() const {
  uint64_t n = impl_->tables.pending_bytes();
  for (const auto& t : impl_->types) n += t.raw_bytes;
  return n;
}

}  // namespace flightrec::format
