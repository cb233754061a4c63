// Budget tally: the disk budget (FLIGHTREC_MAX_DISK_BYTES) applied at each
// seal without a scan of the output directory per seal.
//
// Why: a full scan (EnforceDiskBudgetAt) stats every segment file in the
// directory. A test suite or a build run under the preload starts thousands
// of short processes into one directory, each sealing one segment, and with
// a scan per seal each process's exit cost ~2 us per file already there
// (+40 ms per process at 20,000 files): quadratic in the run's length.
//
// How: the directory keeps a small tally file (kBudgetTallyName) shared by
// every process writing there: the bytes counted since the last full scan
// and when that scan ran. A seal adds its segment's size under an flock; the
// full scan runs only when the tally passes the budget, when the last scan is
// older than kBudgetRescanNs (what no seal counts: a killed process's
// .active file, segments uploaded or removed by hand), or when the tally is
// missing, unreadable or from the future. The scan's total becomes the new
// tally. The tally is a hint: it can only make the scan come early or late
// by what others wrote meanwhile, never delete more than the full scan does.
//
// Never blocks long: the flock is tried without waiting, a few times; a
// seal that cannot have it counts nothing (the next rescan catches up). A
// directory whose tally cannot be opened (a process that dropped its
// privileges) falls back to a scan per seal, as before. Flush thread only.
#pragma once
#include <cstdint>

namespace flightrec {

inline constexpr const char* kBudgetTallyName = ".flightrec-budget";
inline constexpr uint64_t kBudgetRescanNs = 60ull * 1000000000ull;

// After a segment of sealed_bytes was sealed into the directory open as
// dir_fd: counts it, and runs the full scan when due. realtime_ns is
// CLOCK_REALTIME (shared by every process writing there). Returns how many
// segments the scan deleted (0 when no scan ran).
uint64_t AccountSealedSegment(int dir_fd, uint64_t max_bytes, uint64_t sealed_bytes, uint64_t realtime_ns);

}  // namespace flightrec
