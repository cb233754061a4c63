// SegmentWriter: encodes events into one segment file (header, then
// self-framed blocks: SCHEMA, intern tables, columnar EVENTS, FOOTER).
//
// Ownership and threading: a writer is owned and used by exactly one thread
// (the flush thread). It is not thread-safe and never called from hot paths.
// It interns strings, stacks, locations and mappings per segment so every
// sealed file is self-contained; ids never cross segments.
//
// Lifecycle: Open() -> {DefineEventType, Append, Flush}* -> Seal(). After
// Seal() the same writer may Open() the next segment; event type ids stay
// stable across segments (schemas are re-emitted in each segment).
//
// Descriptors: the writer holds none between writes. Each write (the header,
// a flush, the footer, and 64 KiB of full batches' blocks waiting for the
// next flush) opens the file by name through its SegmentFileAccess, writes
// at the file's known end and closes it, so the program it records never
// sees (nor inherits through fork, nor runs out of numbers because of) the
// segment's descriptor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/format_constants.h"
#include "format/framing.h"

namespace flightrec::format {

struct FieldSpec {
  std::string name;
  FieldType type;
  std::string unit;  // "ns", "bytes", "count", "" ...
  // Packed types only: the index of an earlier integer field this one follows
  // closely (a connection id and its fd); the column is then stored as
  // differences from that one (SPEC.md 5.4, PACKED_REL). -1: none.
  int follows = -1;
};

// fields[0] must be {"time", kTime, "ns"}: every event has a monotonic time.
// packed: integer columns use the packed schemes where they can (SPEC.md
// 5.4: common low zero bits shifted out, byte planes), which readers since
// then decode; not part of the schema, so a type's layout is the same either way.
struct EventTypeSpec {
  std::string name;  // dotted, e.g. "thread.start"
  std::vector<FieldSpec> fields;
  bool packed = false;
};

struct SegmentHeaderInfo {
  uint32_t pid = 0;
  WriterIdentity identity;
  uint64_t sequence = 0;             // segment number within this process
  uint64_t anchor_monotonic_ns = 0;  // taken together with anchor_realtime_ns
  uint64_t anchor_realtime_ns = 0;
  std::string service;
  std::string host;
};

// One value per field, in schema order. Which member is read depends on the
// field type: kTime/kUInt -> u, kSInt -> s, kF64 -> f, kString/kBytes -> bytes
// (text; the writer interns strings), kStack -> pcs/npcs (leaf first; caller
// addresses already adjusted to point inside the call instruction).
struct Value {
  uint64_t u = 0;
  int64_t s = 0;
  double f = 0;
  std::string_view bytes;
  const uint64_t* pcs = nullptr;
  uint32_t npcs = 0;

  static Value U(uint64_t v) {
    Value x;
    x.u = v;
    return x;
  }
  static Value S(int64_t v) {
    Value x;
    x.s = v;
    return x;
  }
  static Value F(double v) {
    Value x;
    x.f = v;
    return x;
  }
  static Value Str(std::string_view v) {
    Value x;
    x.bytes = v;
    return x;
  }
  static Value Stack(const uint64_t* p, uint32_t n) {
    Value x;
    x.pcs = p;
    x.npcs = n;
    return x;
  }
};

// What the writer needs to describe a pc the first time a segment uses it.
struct MappingInfo {
  uint64_t start = 0, end = 0, file_offset = 0;
  std::string path;
  std::string build_id;  // lowercase hex, may be empty
};
struct FrameLine {
  std::string function;  // demangled; empty if unknown
  std::string file;
  uint32_t line = 0;
};
class PcDescriber {
 public:
  virtual ~PcDescriber() = default;
  // Fills the mapping containing pc and its frames, innermost (inlined) first.
  // Returns false if pc is in no known mapping (the location is still written,
  // with mapping id 0 and no lines).
  virtual bool Describe(uint64_t pc, MappingInfo* mapping, std::vector<FrameLine>* lines) = 0;
  // Changes whenever a pc described earlier without a function name (or
  // without a mapping) may now be described better, e.g. once file
  // descriptors come back after the host used them all. The intern tables
  // ask again for such pcs only after it changed. Called on the same thread
  // as Describe and may do a little work (the symbolizer probes whether it
  // can open files again while it could not); a describer whose answers
  // never improve keeps the default.
  virtual uint64_t Generation() { return 0; }
  // The time (the events' clock, ns) from which Describe's answers hold:
  // code unloaded then may have left its addresses to other code. Events
  // older than it have their pcs described by DescribeBefore instead, and a
  // new value means every pc must be described afresh. 0: always held.
  // Called on the same thread as Describe, before each stack and again after
  // one whose pcs were described (a new value then means they may describe
  // what came after the event: they are described again).
  virtual uint64_t WorldStart() { return 0; }
  // For an event older than WorldStart(): which era of the describer's it
  // falls in. Events of one era have their pcs described alike.
  virtual uint64_t EraBefore(uint64_t /*time_ns*/) { return 0; }
  // Describes pc as it was in that era.
  virtual bool DescribeBefore(uint64_t pc, uint64_t /*era*/, MappingInfo* mapping, std::vector<FrameLine>* lines) {
    return Describe(pc, mapping, lines);
  }
};

// How the writer reaches its file between writes. The default opens names
// relative to the current directory; the preload's opens them relative to a
// freshly opened output directory, as protected descriptors
// (preload/flush/segment_access.h).
class SegmentFileAccess {
 public:
  virtual ~SegmentFileAccess() = default;
  // Opens `name` with flags (O_WRONLY|O_NOFOLLOW|O_CLOEXEC, plus
  // O_CREAT|O_EXCL and mode for a new segment). Returns the descriptor, or
  // -1 with errno set (ENOENT: the file or its directory is gone;
  // EMFILE/ENFILE: no descriptor free now).
  virtual int Open(const std::string& name, int flags, unsigned mode);
  // True if the descriptor Open returned is no longer ours (the program
  // dup2'd over its number): the writer then neither writes to nor closes it.
  virtual bool Lost(int /*fd*/) { return false; }
  virtual void Close(int fd);
  virtual void Unlink(const std::string& name);
};

struct WriterStats {
  uint64_t bytes_written = 0;   // file size so far
  uint64_t events_written = 0;  // events in blocks already written
  uint64_t first_time_ns = 0, last_time_ns = 0;
};

class SegmentWriter {
 public:
  SegmentWriter();
  ~SegmentWriter();
  SegmentWriter(const SegmentWriter&) = delete;
  SegmentWriter& operator=(const SegmentWriter&) = delete;

  // Optional; used for kStack fields. Not owned; must outlive the writer.
  void SetPcDescriber(PcDescriber* describer);

  // How files are reached (not owned; must outlive the writer). Default: by
  // path, relative to the current directory. Set before Open.
  void SetFileAccess(SegmentFileAccess* access);

  // Creates `path` through the file access (O_CREAT|O_EXCL|O_NOFOLLOW|
  // O_CLOEXEC, mode 0600), writes the header and closes it again. On failure
  // returns false and sets *error (errno text); a file it created but could
  // not write the header to is removed again.
  bool Open(const std::string& path, const SegmentHeaderInfo& header, std::string* error);
  // A segment is open (between Open and Seal/Abandon): no descriptor is.
  bool is_open() const;
  // The descriptor of a write in progress, -1 between writes: what a fork
  // child of a process whose recorder was mid-write must close.
  int fd() const;

  // The last write found no descriptor free (EMFILE/ENFILE): what it held
  // stays buffered, in order, and goes out with the next write that can open
  // the file. Nothing is lost unless that takes more than kMaxDeferredBytes
  // of blocks (the write then fails as any other). Cleared by a write that
  // succeeds.
  bool write_deferred() const;
  static constexpr size_t kMaxDeferredBytes = 32u << 20;
  // The last write failed because the file (or its directory) was gone:
  // removed under us. Valid until the next Open.
  bool file_vanished() const;
  // Updates the file's modification time (a live writer's sign for other
  // processes' disk budgets, preload/flush/writer_liveness.h) if the segment
  // is open and usable; nothing else changes.
  void Touch();

  // Returns the event type id (dense, from 1). May be called before Open.
  uint32_t DefineEventType(const EventTypeSpec& spec);

  // Buffers one event. values has one entry per field of the type.
  void Append(uint32_t type_id, const Value* values, size_t nvalues);

  // The same for a writer that produces column values itself, for event
  // types written at a high rate (socket.op): column[f] is what Append
  // would store for field f: kTime/kUInt as is, kSInt as its two's
  // complement bits, kF64 as its bit pattern, kString as an id from
  // StringId. Types with kBytes or kStack fields are rejected (counted like
  // Append's rejections). Saves the per-field Value dispatch and the string
  // lookup of every event.
  void AppendColumns(uint32_t type_id, const uint64_t* column, size_t ncolumns);
  // The id Append would give the string s in the open segment. Ids are
  // valid while string_epoch() is unchanged (it changes at every Open, Seal
  // and Abandon); cache them under it.
  uint32_t StringId(std::string_view s);
  uint64_t string_epoch() const { return *string_epoch_; }

  // Writes buffered events (preceded by any new intern-table entries and
  // schema) as blocks. Returns false on a write error (*error set); the
  // writer then stays usable only for Seal/close, and the file is cut back
  // to its last successful write (whole blocks only).
  bool Flush(std::string* error);

  // Flushes, writes the FOOTER (counts, time range, and the given extra
  // counters e.g. "dropped.alloc.sample"), fsyncs optionally and closes the
  // file. Does not rename: the caller owns naming.
  bool Seal(const std::vector<std::pair<std::string, uint64_t>>& footer_counters, std::string* error);

  // Gives the segment up without a footer (after write errors); the file
  // stays as written.
  void Abandon();

  // Events that never reached the file, per event type name, since the last
  // call (which resets them): those in a write that failed, appended after
  // it, or still buffered when the segment was abandoned. The owner counts
  // them as dropped, so a write failure loses nothing uncounted.
  std::vector<std::pair<std::string, uint64_t>> TakeLostEvents();
  // The segment's file is gone (unlinked under us): the events already
  // written to it are lost too. Valid until the next Open.
  void LoseWrittenEvents();

  WriterStats stats() const;
  uint64_t buffered_bytes() const;  // rough raw size of unflushed events
  // Rows the type's batch array holds now (0 before its first event, and
  // again after a batch that used under a quarter of it): for tests.
  uint32_t batch_capacity(uint32_t type_id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  // The intern tables' epoch inside *impl_ (which never moves): read once
  // per event by high-rate writers, so not behind a call.
  const uint64_t* string_epoch_;
};

}  // namespace flightrec::format
