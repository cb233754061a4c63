// Allocation stack trimming (see alloc_stack_trim.h). Everything here except
// LeadingTrimmed runs once at init.
#include "preload/alloc/alloc_stack_trim.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

namespace flightrec::alloc {

void TrimRanges::Add(uint64_t lo, uint64_t hi) {
  if (hi <= lo || n_ >= kMax) return;
  for (int i = 0; i < n_; ++i)
    if (r_[i].lo == lo && r_[i].hi == hi) return;
  r_[n_++] = PcRange{lo, hi};
}

bool TrimRanges::Contains(uint64_t pc) const {
  for (int i = 0; i < n_; ++i)
    if (pc >= r_[i].lo && pc < r_[i].hi) return true;
  return false;
}

int TrimRanges::LeadingTrimmed(const uint64_t* pcs, int n) const {
  int k = 0;
  while (k < n && Contains(pcs[k])) ++k;
  return k;
}

namespace {

struct FindText {
  uintptr_t addr;
  TrimRanges* out;
  int added;
};

bool SegmentHolds(const dl_phdr_info* info, const ElfW(Phdr) & ph, uintptr_t addr) {
  const uint64_t lo = info->dlpi_addr + ph.p_vaddr;
  return ph.p_type == PT_LOAD && addr >= lo && addr < lo + ph.p_memsz;
}

// Adds the executable segments of the object one of whose segments holds addr.
int OnObject(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<FindText*>(data);
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum && !mine; ++i) mine = SegmentHolds(info, info->dlpi_phdr[i], f->addr);
  if (!mine) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    const uint64_t lo = info->dlpi_addr + ph.p_vaddr;
    f->out->Add(lo, lo + ph.p_memsz);
    f->added++;
  }
  return 1;
}

}  // namespace

int AddObjectTextRanges(const void* addr, TrimRanges* out) {
  FindText f{reinterpret_cast<uintptr_t>(addr), out, 0};
  dl_iterate_phdr(OnObject, &f);
  return f.added;
}

int AddOperatorNewRanges(TrimRanges* out) {
  static const char* const kNames[] = {
      "_Znwm",                               // operator new(size_t)
      "_Znam",                               // operator new[](size_t)
      "_ZnwmRKSt9nothrow_t",                 // operator new(size_t, nothrow_t const&)
      "_ZnamRKSt9nothrow_t",                 // operator new[](size_t, nothrow_t const&)
      "_ZnwmSt11align_val_t",                // operator new(size_t, align_val_t)
      "_ZnamSt11align_val_t",                // operator new[](size_t, align_val_t)
      "_ZnwmSt11align_val_tRKSt9nothrow_t",  // + nothrow
      "_ZnamSt11align_val_tRKSt9nothrow_t",
  };
  int added = 0;
  for (const char* name : kNames) {
    void* fn = dlsym(RTLD_DEFAULT, name);
    if (!fn) continue;
    Dl_info info;
    ElfW(Sym)* sym = nullptr;
    if (dladdr1(fn, &info, reinterpret_cast<void**>(&sym), RTLD_DL_SYMENT) == 0 || !sym) continue;
    // The symbol dladdr finds must be the one that starts at fn (not an
    // enclosing or neighbouring one), and have a size.
    if (info.dli_saddr != fn || sym->st_size == 0) continue;
    const uint64_t lo = reinterpret_cast<uint64_t>(fn);
    out->Add(lo, lo + sym->st_size);
    added++;
  }
  return added;
}

}  // namespace flightrec::alloc
