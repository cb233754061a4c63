// Window keeper: flight-recorder mode (FLIGHTREC_MODE=window) and incidents.
//
// Owns, for one process (a forked child gets its own):
//  * turning trigger requests (preload/runtime/trigger.h) into `trigger`
//    events and incidents, in either mode: an incident is the span
//    [first trigger - FLIGHTREC_WINDOW_SECONDS, last trigger +
//    FLIGHTREC_TRIGGER_AFTER_SECONDS]; a trigger while one is open merges
//    into it (extending its end, up to kMaxSpanAfters x the after-period past
//    its first trigger); new incidents are rate-limited (a bucket of
//    kIncidentBurst, one more every kIncidentRefillNs) and what is refused is
//    counted and reported (`suppressed` in the next trigger event, and a
//    recorder.dropped of kind trigger.suppressed);
//  * the trigger sources the flush thread checks itself: the on-demand
//    control file `.trigger-PID-START` in the output directory (written by
//    `flightrec-dump trigger`; no signal reaches the service), and resident
//    memory against FLIGHTREC_TRIGGER_RSS_MB. START is the process's start
//    time as the kernel keeps it (field 22 of /proc/PID/stat), so a file
//    aimed at an earlier process with the same pid (or at a pid of another
//    pid namespace) names another file. It is obeyed only if it is a
//    regular file with one link, owned by this process's effective uid or
//    root (checked on the open file: O_NOFOLLOW, fstat), and written no
//    earlier than the second the process started; one it obeys, or a stale
//    one of ours, is deleted; one of another user is left alone, logged once;
//  * in window mode, the segments on disk: a sealed segment no incident
//    covers is made read-only (0400, the uploader's "nothing to ship" mark)
//    and deleted once it is older than the window; segments an incident
//    covers are renamed NAME@TAG.seg (TAG: the incident's UTC stamp), left
//    owner-writable, and handed to the uploader, which ships them under a
//    key naming the incident.
//
// Flush thread (or the thread that took the writer over at exit) only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "preload/flush/flush_registry.h"
#include "preload/flush/segment_files.h"
#include "preload/runtime/trigger.h"

namespace flightrec {

class OutputDir;

// The `trigger` event type; at init, before the flush thread starts.
void RegisterTriggerEvents();

class WindowKeeper {
 public:
  WindowKeeper();

  // Each tick, before a possible seal: takes trigger requests, polls the
  // control file and RSS (at most every kPollNs), writes trigger events.
  // Returns true when an open incident's after-period has ended: the active
  // segment should be sealed now, so the incident is complete on disk.
  bool Tick(FlushContext& ctx);

  // At seal time: the tag the segment being sealed goes under ("" = none),
  // given when it was opened (CLOCK_MONOTONIC).
  std::string TagFor(uint64_t opened_ns) const;
  // After the seal rename (window mode): a segment no incident covers joins
  // the window, to be deleted once older than it.
  void AddWindowSegment(const std::string& dir_path, const std::string& name, uint64_t sealed_ns);
  // After every seal: closes an incident whose after-period ended, and
  // deletes window segments older than the window; returns what it deleted
  // (for the disk budget's tally, budget_tally.h).
  BudgetDeletions AfterSeal(OutputDir& dir, uint64_t now_ns);

  // When a tick must come to close the open incident (UINT64_MAX: none).
  uint64_t NextDutyNs() const { return incident_.open ? incident_.end_ns + 1 : UINT64_MAX; }

  // The rotation period window mode uses: short enough that the disk holds
  // little more than the window.
  static uint64_t SegmentSecondsFor(uint64_t configured_seconds);

 private:
  struct Segment {
    std::string dir_path, name;
    uint64_t sealed_ns;
  };
  struct Incident {
    bool open = false;
    uint64_t number = 0;
    uint64_t first_ns = 0, start_ns = 0, end_ns = 0;
    std::string tag;
  };

  void Handle(FlushContext& ctx, TriggerReason reason, uint64_t time_ns, uint64_t detail, const std::string& note);
  enum class Merged : bool { kNo = false, kYes = true };  // into an open incident
  void Emit(FlushContext& ctx, TriggerReason reason, uint64_t time_ns, uint64_t detail, const std::string& note,
            Merged merged);
  void KeepWindowFor(const Incident& incident);
  void PollSources(uint64_t now_ns);
  void PollControlFile();
  BudgetDeletions Expire(OutputDir& dir, uint64_t now_ns);

  const bool window_mode_;
  const uint64_t window_ns_, after_ns_;
  Incident incident_;
  uint64_t last_incident_end_ns_ = 0;
  uint64_t tokens_;
  uint64_t refill_at_ns_ = 0;
  uint64_t suppressed_ = 0;        // refused since the last trigger event
  uint64_t suppressed_total_ = 0;  // reported as recorder.dropped
  uint64_t last_event_ns_ = 0;
  uint64_t last_poll_ns_ = 0;
  bool rss_above_ = false;
  std::string demand_note_;  // what the control file said, for the next demand trigger
  // The control file's name and the second the process started (read from
  // /proc/self/stat at the first look; empty: unknown, no on-demand trigger).
  bool control_known_ = false;
  std::string control_name_;
  std::string control_path_;  // FLIGHTREC_OUTPUT/control_name_, for the cheap look first
  int64_t started_sec_ = 0;
  bool foreign_logged_ = false, stale_logged_ = false;
  std::vector<Segment> window_;  // oldest first
};

}  // namespace flightrec
