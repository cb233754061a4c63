// Allocation stack trimming: the top frames of a stack captured inside the
// malloc hook belong to us (the hook, the sampled path) and, for C++, to
// operator new. They are dropped on the app thread, before the stack is
// stored, so the leaf of every alloc.sample stack is the caller of malloc or
// of operator new.
//
// Trimming is by pc range, not by frame count: inlining decisions cannot
// break it. Ranges: the text of the object holding the hooks (only when it is
// the one interposing malloc), and each operator new / new[] variant the
// process resolves (start from dlsym, length from its ELF symbol size), which
// also covers an application's own replacement operator new.
#pragma once
#include <cstdint>

namespace flightrec::alloc {

struct PcRange {
  uint64_t lo, hi;  // [lo, hi)
};

class TrimRanges {
 public:
  static constexpr int kMax = 24;
  void Add(uint64_t lo, uint64_t hi);
  bool Contains(uint64_t pc) const;
  int size() const { return n_; }
  void Clear() { n_ = 0; }

  // Number of leading pcs (leaf first) that fall in a range.
  int LeadingTrimmed(const uint64_t* pcs, int n) const;

 private:
  PcRange r_[kMax] = {};
  int n_ = 0;
};

// Executable PT_LOAD ranges of the loaded object containing `addr`.
// Returns the number of ranges added.
int AddObjectTextRanges(const void* addr, TrimRanges* out);

// Adds every operator new / new[] variant found in the global scope.
// Returns the number of ranges added.
int AddOperatorNewRanges(TrimRanges* out);

}  // namespace flightrec::alloc
