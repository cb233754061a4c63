// Compile-unit address ranges (see cu_ranges.h).
#include "sampler/symbols/cu_ranges.h"

#include <algorithm>

namespace flightrec::sampler {

void CuRanges::Build(Dwarf* dw) {
  ranges_.clear();
  if (dw == nullptr) return;
  // Bounded: a hostile or huge file cannot make the flush thread read
  // without end (Go programs have one unit per package, a few thousand).
  constexpr size_t kMaxRanges = 1 << 20;
  Dwarf_Off off = 0, next = 0;
  size_t header_size = 0;
  while (ranges_.size() < kMaxRanges && dwarf_nextcu(dw, off, &next, &header_size, nullptr, nullptr, nullptr) == 0) {
    Dwarf_Die cu;
    if (dwarf_offdie(dw, off + header_size, &cu) != nullptr) {
      Dwarf_Addr base = 0, lo = 0, hi = 0;
      ptrdiff_t it = 0;
      while (ranges_.size() < kMaxRanges && (it = dwarf_ranges(&cu, it, &base, &lo, &hi)) > 0) {
        if (hi > lo) ranges_.push_back(Range{lo, hi, off + header_size});
      }
    }
    off = next;
  }
  std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
}

bool CuRanges::Find(Dwarf* dw, uint64_t dwarf_pc, Dwarf_Die* cu) const {
  // The last range starting at or below pc, then back over earlier ones
  // that may still reach past it (units may interleave).
  auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), dwarf_pc, [](uint64_t pc, const Range& r) { return pc < r.lo; });
  for (int steps = 0; it != ranges_.begin() && steps < 64; ++steps) {
    --it;
    if (dwarf_pc < it->hi) return dwarf_offdie(dw, it->cu_die, cu) != nullptr;
  }
  return false;
}

}  // namespace flightrec::sampler
