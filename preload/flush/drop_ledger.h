// Drop ledger: the one owner of the accounting of lost data (issue 40).
//
// The invariant it keeps, per kind (a record kind's name, an event type, or
// a named loss such as "alloc.table_full"):
//
//     produced = recorded + dropped
//
// recorded: what reached a readable block of a segment; dropped: what a
// reader finds in `recorder.dropped` events (and in the footer's
// `dropped.<kind>` totals). Produced is not counted on the hot path (a
// counter per record would cost every hook); tests count it as the producer
// (tests/unit/flush_drop_ledger_test.cc).
//
// Where a loss is first counted stays where it happens, lock-free and
// allocation-free: a full ring adds to ThreadState::dropped (RecordWriter), a
// thread with no slot to g_unattributed_drops, a refused sample to the
// sampler queue's counters, a full table to its own. Everything after that is
// here, on the flush thread:
//  * growth: a running total reported once, by what grew since the last
//    report (ReportGrowth, ReportThreadDrops, Growth for totals that are
//    reported as other events, sampler.lost);
//  * records drained while no segment is open (paused output): counted per
//    kind (Discarded) and reported when a segment is open again;
//  * the writer's losses: events in blocks that never reached the file,
//    reported again under their event type (ReportOutputLosses);
//  * the segment footer's totals, and their carry-over at rotation: drop
//    reports that were only in blocks that never reached the disk (a failed
//    write, a file removed under us) are reported again in the next segment
//    (BlockWritten, WriteFailed, Sealed, SealedFileLost);
//  * fork: a child starts a ledger of its own (ResetInForkChild): the
//    parent's totals are the parent's; exit: the final tick reports what is
//    left (ReportOutputLosses) before the final seal writes the footer. The
//    ledger lives as long as the process image: a flush thread restarted
//    after a uid switch or a failed exec goes on with it.
//
// Not thread-safe: every caller is on the flush thread (decoders, flush
// sources, seal code).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "format/segment_writer.h"
#include "preload/flush/flush_registry.h"
#include "preload/threads/record_kinds.h"

namespace flightrec {

struct ThreadState;

class DropLedger {
 public:
  using Totals = std::vector<std::pair<std::string, uint64_t>>;  // footer keys "dropped.<kind>"
  using KindNameFn = const char* (*)(uint16_t kind);

  // The recorder.dropped event type: (time, tid, kind, count).
  static format::EventTypeSpec EventSpec();
  void SetEventType(uint32_t id) { type_ = id; }

  // What grew since *reported (marked reported). A total that went back
  // (a counter reset under us) counts from zero.
  static uint64_t Growth(uint64_t total, uint64_t* reported) {
    const uint64_t d = total >= *reported ? total - *reported : total;
    *reported = total;
    return d;
  }

  // `n` of `kind` lost: a recorder.dropped event (tid 0: not charged to a
  // thread) and the segment's footer total.
  void Report(FlushContext& ctx, uint64_t tid, const char* kind, uint64_t n);
  // The footer total only (losses with no event of their own: segments the
  // disk budget deleted, SIGPROF stepped aside).
  void Count(const char* kind, uint64_t n);
  // A running total of `kind` losses: its growth since the last report.
  void ReportGrowth(FlushContext& ctx, const char* kind, uint64_t total, uint64_t* reported) {
    if (total != *reported) Report(ctx, 0, kind, Growth(total, reported));
  }
  // One thread's ring drops since the last drain, per record kind (the
  // counters beside its ring: ThreadState::dropped, dropped_reported).
  void ReportThreadDrops(FlushContext& ctx, uint64_t tid, const std::atomic<uint64_t>* dropped, uint64_t* reported,
                         KindNameFn name_of = RecordKindName);
  void ReportThreadDrops(FlushContext& ctx, ThreadState* ts);
  // Records no thread slot could take (UnattributedDrops()).
  void ReportUnregistered(FlushContext& ctx, uint64_t total) {
    ReportGrowth(ctx, "unregistered_thread", total, &unregistered_reported_);
  }

  // A ring record drained while no segment is open: lost, under its kind.
  void Discarded(uint16_t kind) { discarded_[kind < kRecordKindCount ? kind : 0]++; }
  // A thread that ended while no segment is open: its slot is about to be
  // freed (and its counters reset for the next owner), so its ring drops not
  // yet reported join the discarded records, reported when a segment opens.
  void DiscardThreadDrops(const std::atomic<uint64_t>* dropped, uint64_t* reported);
  // `n` of a named loss found while no segment is open: reported (tid 0)
  // with the discarded records once a segment opens.
  void LostWhilePaused(const char* kind, uint64_t n) { carried_[kind] += n; }
  // Everything the output lost, under the kind it would have been recorded
  // as: records discarded while paused, events the writer could not write
  // (ctx.writer's), drop reports that never reached the disk. Once per tick
  // with a segment open, the final tick's before its seal.
  void ReportOutputLosses(FlushContext& ctx, KindNameFn name_of = RecordKindName);

  // The current segment's footer totals, left in place until it is sealed.
  Totals Footer() const { return Totals(footer_.begin(), footer_.end()); }
  // A block write reached the file: the drop reports so far are on disk.
  void BlockWritten() { durable_ = footer_; }
  // A write (or the seal) failed, or the file vanished (w.file_vanished()):
  // the segment is given up. What its readable blocks do not report
  // (nothing, if the file is gone) is carried to the next segment, and a
  // vanished file's events count as lost (the writer's lost events).
  void WriteFailed(format::SegmentWriter& w);
  // The footer with `Footer()`'s totals is on disk.
  void Sealed();
  // ... and then the sealed file was removed under us before its rename:
  // its totals (`Footer()` as sealed) are carried, its events lost.
  void SealedFileLost(const Totals& sealed_totals, format::SegmentWriter& w);

  // A forked child: nothing of the parent's is the child's to report.
  void ResetInForkChild();

 private:
  void Carry(const Totals& totals, bool file_gone, format::SegmentWriter& w);

  uint32_t type_ = 0;
  std::map<std::string, uint64_t> footer_;   // this segment's totals, "dropped.<kind>"
  std::map<std::string, uint64_t> durable_;  // footer_ as of the segment's last successful write
  std::map<std::string, uint64_t> carried_;  // by kind: reported again in the next segment
  uint64_t discarded_[kRecordKindCount] = {};
  uint64_t unregistered_reported_ = 0;
};

// The process's ledger (the flush thread's).
DropLedger& TheDropLedger();

// Shorthands for producers: TheDropLedger().Report(ctx, 0, kind, count) and
// TheDropLedger().Count(kind, count).
void EmitGlobalDrops(FlushContext& ctx, const char* kind, uint64_t count);
void AddFooterDrop(const char* kind, uint64_t count);

}  // namespace flightrec
