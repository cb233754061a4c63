// Budget tally: the disk budget (FLIGHTREC_MAX_DISK_BYTES) applied at each
// seal without a scan of the output directory per seal, and the record of
// what the budget deleted, which `flightrec-dump info` prints.
//
// Why: a full scan (EnforceDiskBudgetAt) stats every segment file in the
// directory. A test suite or a build run under the preload starts thousands
// of short processes into one directory, each sealing one segment, and with
// a scan per seal each process's exit cost ~2 us per file already there
// (+40 ms per process at 20,000 files): quadratic in the run's length.
// And a deletion must be visible to whoever reads the directory later: the
// process that made it may exit right after (its footer drop would reach no
// segment), and the segment that would report it may be deleted in turn.
//
// How: the directory keeps a small tally file (kBudgetTallyName) shared by
// every process writing there: the allocated bytes counted since the last
// full scan and when that scan ran, plus running totals of what scans
// deleted (segments and bytes, kept incidents among them, expired windows of
// exited processes) since the tally was made. A seal adds its segment's
// allocated size under an flock; a process's own window expiry subtracts
// what it freed; the full scan runs only when the tally passes the budget,
// when the last scan is older than the rescan period (kBudgetRescanNs; in
// window mode at most the window, so exited processes' windows expire on
// time), or when the tally is missing, unreadable or from the future. The
// scan's total becomes the new tally. The tally is a hint: it can only make
// the scan come early or late by what others wrote meanwhile, never delete
// more than the full scan does.
//
// Layout (native byte order; `flightrec-dump info` reads it): 8 bytes of
// magic "FRBUDG2\0", then uint64 fields: bytes, last_scan_ns, since_ns,
// deleted_segments, deleted_bytes, deleted_incidents, expired_windows,
// expired_bytes, last_deletion_ns (CLOCK_REALTIME ns). Anything else (an
// older layout, short, damaged) is unknown: a full scan rebuilds it, and the
// deletion totals start again from zero.
//
// Never blocks long: the flock is tried without waiting, a few times; a
// seal that cannot have it counts nothing (the next rescan catches up). A
// directory whose tally cannot be opened (a process that dropped its
// privileges) falls back to a scan per seal, as before, and its deletions
// are reported only in the footers. Flush thread only.
#pragma once
#include <cstdint>
#include <string>

#include "preload/flush/segment_files.h"

namespace flightrec {

inline constexpr const char* kBudgetTallyName = ".flightrec-budget";
inline constexpr uint64_t kBudgetRescanNs = 60ull * 1000000000ull;

struct BudgetRules {
  uint64_t max_bytes = 0;
  // Window mode: the window; each scan expires exited processes' window
  // segments older than it, and scans come at least this often. 0: not.
  uint64_t window_ns = 0;
};

// The rules FLIGHTREC_MAX_DISK_BYTES, FLIGHTREC_MODE and
// FLIGHTREC_WINDOW_SECONDS make.
BudgetRules BudgetRulesFromConfig();

// After a segment of sealed_bytes (allocated) was sealed into the directory
// open as dir_fd: counts it, and runs the full scan when due. `freed` is
// what this process deleted itself since its last call (its own expired
// window segments): subtracted from the tally, recorded with the totals.
// realtime_ns is CLOCK_REALTIME (shared by every process writing there).
// Returns how many segments the scan deleted (0 when no scan ran), with the
// details in *deletions when given.
uint64_t AccountSealedSegment(int dir_fd, const BudgetRules& rules, uint64_t sealed_bytes, uint64_t realtime_ns,
                              const BudgetDeletions& freed = {}, BudgetDeletions* deletions = nullptr);

// The flush thread's one call after a seal: the sealed file's allocated
// size, AccountSealedSegment with the config's rules, and the report of what
// the scan deleted (a log line, a warning if a kept incident went, the
// `segments.deleted_for_budget` footer drop).
void ApplyDiskBudgetAfterSeal(int dir_fd, const std::string& sealed_name, const BudgetDeletions& freed);

}  // namespace flightrec
