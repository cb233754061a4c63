// Loading of libdw and libelf, which the symbolizer's elfutils calls reach
// through forwarders (elfutils_lazy.cc says why they are not linked).
#pragma once

namespace flightrec::sampler {

// Loads libdw now if it is not yet (a live hook: the flush thread's first
// tick). Failure is handled as at a first call: retried or logged once.
void LoadElfutils();

// The address spans ([lo, hi) of their PT_LOAD segments) of the libraries
// that loading libdw brought in and the program had not loaded: libdw,
// libelf and whichever of libz, libbz2, liblzma were new. Only the
// recorder's threads run their code, so their pages can be given back
// between symbolizations (source_pages.h) without the program's threads
// ever faulting them in again. Returns how many were written to spans.
int ElfutilsOnlySpans(uint64_t (*spans)[2], int max);

}  // namespace flightrec::sampler
