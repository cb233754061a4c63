// CuRanges: which compile unit of a module holds an address, from the
// units' own DW_AT_low_pc/high_pc/ranges.
//
// Why: libdw answers "which CU holds pc" (dwfl_module_addrdie,
// dwfl_module_getsrc) from .debug_aranges alone when a file has that
// section. Go's linker (1.19 here) writes .debug_aranges entries only for
// the cgo C units, so every Go function's pc was placed in the nearest C
// unit ("runtime/cgo/gcc_mmap.c") with that unit's lines. The symbolizer
// checks libdw's answer with dwarf_haspc and, when it is wrong, asks this
// table, built once per module on the first wrong answer.
#pragma once

#include <elfutils/libdw.h>

#include <cstdint>

#include "format/mi_containers.h"

namespace flightrec::sampler {

class CuRanges {
 public:
  // Reads every unit's address ranges (DWARF addresses, before the
  // module's bias). Units without ranges are skipped.
  void Build(Dwarf* dw);
  // The unit holding dwarf_pc, into *cu; false if none does.
  bool Find(Dwarf* dw, uint64_t dwarf_pc, Dwarf_Die* cu) const;
  size_t size() const { return ranges_.size(); }

 private:
  struct Range {
    uint64_t lo, hi;   // [lo, hi)
    Dwarf_Off cu_die;  // offset of the unit's DIE in .debug_info
  };
  format::MiVector<Range> ranges_;  // sorted by lo
};

}  // namespace flightrec::sampler
