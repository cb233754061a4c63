// Symbol sources' pages: what libdw read of the files it maps, given back.
//
// libelf maps each module's ELF file and each separate debug file whole
// and private (PROT_READ|PROT_WRITE, offset 0) for as long as the module
// stays reported, and every page libdw ever read stays resident in the
// process: 400-800 KiB in a redis-server that named its own code from its
// debug file, ~110 KiB per PostgreSQL backend ("symbol sources" in
// bench/process_memory.py, issue #44). Such a page is a page of the file,
// shared with the page cache: read again, it comes back from there as it
// was. So between symbolizations the mappings can let go of them.
//
// Only pages that are still the file's are let go. A page libelf wrote to
// is anonymous now (copy-on-write) and would lose what was written;
// /proc/self/pagemap tells the two apart (bit 61, "file page"), readable by
// the process itself without privileges.
//
// Invariant: called on the thread that uses libdw (the symbolizer's), so
// no page of these mappings changes between the check and the madvise.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flightrec::sampler {

// Unmaps every present page of [start, end) that is still the file's own
// (MADV_DONTNEED on runs of them). Rounds outward to whole pages. Returns
// the bytes let go; 0 when pagemap cannot be read.
size_t ReleaseCleanFilePages(uint64_t start, uint64_t end);

}  // namespace flightrec::sampler
