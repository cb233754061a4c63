// Code runs: which stretches of a maps snapshot are loaded code images, for
// reporting them to libdw as modules (one per image).
//
// Why not libdw's own dwfl_linux_proc_report: it makes one module of every
// line of a file from the first to the last, across anonymous lines. The
// recorder maps module files itself to read them (module_elf.h); such a
// mapping near the library's own load made libdw report one module from
// there, with a wrong load bias, and the library's pcs went unnamed. It also
// reads /proc/PID/maps again, so its view and ours could differ by a dlopen.
//
// Here an image is a run of mappings of one file (same path and inode),
// contiguous in the address space (anonymous mappings between, such as
// .bss, do not break it), whose file offsets increase from 0 (where the ELF
// header is: libdw takes a module's low address for its first page), and
// that holds an executable mapping. A whole-file read-only mapping (ours, or
// a data file) holds no code and is not an image; a second load of the same
// file starts again at offset 0 and so is another image; a piece of a file
// mapped alone elsewhere (node maps part of its binary again near its heap)
// does not start at 0 and is not an image (its pcs stay unnamed rather than
// named with a wrong bias). The vDSO is an image of its own.
#pragma once
#include <cstdint>

#include "sampler/symbols/proc_maps.h"

namespace flightrec::sampler {

// Calls report(name, lo, hi) once per image, in address order. name (a C
// string) is the file's path, or "[vdso]" for the vDSO.
template <class Report>
void ForEachCodeRun(const ProcMaps& maps, Report&& report);

// ---- implementation ----

template <class Report>
void ForEachCodeRun(const ProcMaps& maps, Report&& report) {
  const auto& e = maps.entries();
  size_t i = 0;
  while (i < e.size()) {
    const MapEntry& first = e[i];
    if (first.path == "[vdso]") {
      report("[vdso]", first.start, first.end);
      i++;
      continue;
    }
    if (first.path.empty() || first.path[0] != '/' || first.inode == 0) {
      i++;
      continue;
    }
    // Extend the run: the same file at increasing offsets, nothing but
    // anonymous memory between, no hole.
    bool code = first.executable;
    uint64_t hi = first.end, last_end = first.end, last_offset = first.offset;
    size_t j = i + 1;
    for (; j < e.size() && e[j].start == last_end; j++) {
      const MapEntry& m = e[j];
      if (m.path.empty()) {  // anonymous (.bss past the file's end)
        last_end = m.end;
        continue;
      }
      if (m.inode != first.inode || m.path != first.path || m.offset <= last_offset) break;
      code |= m.executable;
      hi = last_end = m.end;
      last_offset = m.offset;
    }
    if (code && first.offset == 0) report(first.path.c_str(), first.start, hi);
    // Resume at the first line not taken into the run (an anonymous line
    // that was only passed over is skipped again there, harmlessly).
    i = j > i + 1 ? j : i + 1;
  }
}

}  // namespace flightrec::sampler
