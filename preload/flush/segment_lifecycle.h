// Segment lifecycle: the flush thread's active segment, from open to seal.
//
// Owns the writer and the segment it writes: opening (the first one at
// start or, for a forked child, at its first tick; the checks that pause
// recording instead: RLIMIT_NOFILE, RLIMIT_FSIZE, the output directory),
// the block write every kBlockIntervalNs, the touch a live writer owes other
// processes' disk budgets, rotation (size, age, an incident done), the seal
// (footer, rename to .seg, seal hooks, window mode, disk budget), and the
// pause when the output is unusable and its retry every 5 s. What the output
// loses on the way (a failed write, a file removed under us) is handed to the
// drop ledger (drop_ledger.h), which reports it again in the next segment.
//
// The loop that decides when this runs, the ring drain and the hand-over to
// a stopper are flush_thread.cc's. Flush thread only (and Launch, before the
// thread exists).
#pragma once
#include <cstdint>
#include <string>

#include "format/segment_writer.h"
#include "preload/runtime/core_events.h"

namespace flightrec {

class WindowKeeper;

struct SegmentLifecycle {
  format::SegmentWriter* writer = nullptr;  // created by OpenFirstSegment
  WindowKeeper* keeper = nullptr;           // triggers, incidents, window mode (window_keeper.h)
  ProcessInfo info;
  uint64_t seq = 0;
  std::string active_path;
  uint64_t opened_ns = 0;
  uint64_t segment_cap = UINT64_MAX;  // FLIGHTREC_SEGMENT_BYTES, or half of RLIMIT_FSIZE if less
  uint64_t last_block_ns = 0;
  uint64_t touched_ns = 0;  // the writer's last Touch (writer_liveness.h)
  uint64_t retry_at_ns = 0;
  bool opened = false;  // OpenFirstSegment ran: the writer exists, a segment was opened (or paused)
  bool paused = false;
  bool paused_logged = false;
  // Paused for a fault the program then survived (a JVM's implicit null
  // check), not because the output failed: resuming is not news.
  bool paused_for_crash = false;
};

// A new flush thread's segments: its keeper, and numbers that continue
// across restarts (failed exec, uid switch).
void InitSegments(SegmentLifecycle& s, const ProcessInfo& info);
// A forked child: a new process, its own numbering.
void ResetSegmentNumbering();

// The writer and the image's first segment: at start (Launch), or for a
// forked child at its first tick. Once.
void OpenFirstSegment(SegmentLifecycle& s, uint64_t now);
// Opens the next segment; false: paused (and logged once).
bool OpenSegment(SegmentLifecycle& s, uint64_t now);
// Seals the active segment: footer, rename to .seg, seal hooks, disk budget.
void SealSegment(SegmentLifecycle& s);
// After a crash's seal: paused, quietly, until the retry (the process may
// live on: a JVM's handled fault).
void PauseAfterCrash(SegmentLifecycle& s);
// After a tick's events: the block write when due, the liveness touch, and
// rotation (size, age, or `incident_done`).
void WriteAndRotate(SegmentLifecycle& s, uint64_t now, bool incident_done);
// When the segment next has timed work: a block write while events wait,
// the age rotation, the keeper's duty, a paused recorder's retry (absolute,
// UINT64_MAX: none).
uint64_t NextSegmentDutyNs(const SegmentLifecycle& s);
// Launch failed: give the segment up.
void AbandonSegment(SegmentLifecycle& s);

}  // namespace flightrec
