// Whether an address-space limit (RLIMIT_AS, RLIMIT_DATA: `ulimit -v`,
// `ulimit -d`) leaves room for the recorder. Recording maps about
// kRecorderAddressSpace (thread stacks, glibc arenas of our threads,
// mimalloc's segments, rings, tables); under a tight limit that room is the
// program's, so the recorder stays off instead of taking it (docs/LIMITS.md).
#pragma once

#include <cstdint>

namespace flightrec {

constexpr uint64_t kRecorderAddressSpace = 256ull << 20;

// Pure decision: with a soft `limit` (RLIM_INFINITY = none) of which `used`
// bytes are taken, recording may start only if what is left is at least
// twice what recording maps (the program keeps at least as much as we take).
bool AddressSpaceRoomFor(uint64_t limit, uint64_t used);

// The same for this process now: RLIMIT_AS against the mapped size and
// RLIMIT_DATA against the data size (/proc/self/statm). No allocation.
// On false, `which` names the limit ("RLIMIT_AS" or "RLIMIT_DATA").
bool ProcessHasRoomForRecorder(const char** which);

// Whether a mapping of this process is charged in full, written or not, to
// a limit the program's own allocations meet: RLIMIT_AS or RLIMIT_DATA set
// (a private writable mapping counts against both, MAP_NORESERVE or not),
// or strict overcommit (vm.overcommit_memory=2 ignores MAP_NORESERVE and
// charges the machine's commit limit). Then a ring sized for the rare
// burst takes room the program may need. Reads one /proc file (about 7 us
// on a VM) when no limit is set. No allocation.
bool UnwrittenMappingsAreCharged();

}  // namespace flightrec
