// Code unloads: which libraries the host unloaded (dlclose), where they lay
// and when, so the symbolizer can name each sample after the code that was
// there when it was taken.
//
// Why it matters: the flush thread names pcs some time after they were
// sampled. A library unloaded meanwhile leaves its addresses free, and the
// next library loaded may land on them; naming an old pc from the maps as
// they are now would name the newcomer's code for the old library's samples
// (and the pc cache would name the newcomer's code after the old library).
// With the record of unloads, the code at pc at time t is that of the first
// library unloaded after t that covered pc, if any; else what is there now.
//
// Written by the dlclose interposer (sampler/symbols/hook_dlclose.cc) on any host
// thread; read by the symbolizer on the flush thread. A fixed ring of
// records, each published with a sequence number: no locks, no allocation.
// A library unloaded as a dependency of the one closed, or by libc itself
// (NSS, iconv modules), is not recorded; the symbolizer then falls back on
// comparing the maps before and after (symbolizer.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace flightrec::sampler {

struct UnloadedObject {
  uint64_t time_ns = 0;     // when the dlclose that unloaded it returned (the trace's clock)
  uint64_t bias = 0;        // load bias (link_map l_addr)
  uint64_t lo = 0, hi = 0;  // [lo, hi): from its first PT_LOAD (page-aligned) to the end of its last
  char path[256] = {};      // as the loader knew it (cut to fit)
};

inline constexpr size_t kUnloadRingSize = 256;

// After a dlclose returned and `obj` is no longer loaded.
void NoteCodeUnloaded(const UnloadedObject& obj);

// Unloads recorded so far (published or being written).
uint64_t CodeUnloadCount();
// Copies unload number `index` (from 0) into *out. False if it is not
// published yet (look again later) or was overwritten (*lost set true).
bool ReadCodeUnload(uint64_t index, UnloadedObject* out, bool* lost);

}  // namespace flightrec::sampler
