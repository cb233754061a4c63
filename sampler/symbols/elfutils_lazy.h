// Loading of libdw and libelf, which the symbolizer's elfutils calls reach
// through forwarders (elfutils_lazy.cc says why they are not linked).
#pragma once

namespace flightrec::sampler {

// Loads libdw now if it is not yet (a live hook: the flush thread's first
// tick). Failure is handled as at a first call: retried or logged once.
void LoadElfutils();

}  // namespace flightrec::sampler
