// SymbolIndex (see symbol_index.h): build once per module, then binary search.
#include "sampler/symbols/symbol_index.h"

#include <elf.h>
#include <gelf.h>

#include <algorithm>

namespace flightrec::sampler {
namespace {

// A symbol read from the table, at its load address, with what ranks it
// among aliases.
struct Candidate {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t limit = 0;
  const char* name = nullptr;
  int binding = 0;  // global 3 > weak 2 > local 1 (dwfl_module_addrsym's order)
  int ndx = 0;      // table order: the earlier of two equal aliases wins
};

int BindingRank(unsigned char info) {
  switch (GELF_ST_BIND(info)) {
    case STB_GLOBAL: return 3;
    case STB_WEAK: return 2;
    case STB_LOCAL: return 1;
    default: return 0;
  }
}

// Which of two symbols at one address names it: a sized one over a sizeless
// one, then the better binding, then the first in the table.
bool Better(const Candidate& a, const Candidate& b) {
  if ((a.size != 0) != (b.size != 0)) return a.size != 0;
  if (a.binding != b.binding) return a.binding > b.binding;
  return a.ndx < b.ndx;
}

// The load address where section shndx of elf ends, 0 if it has none (an
// absolute symbol, or no section headers).
uint64_t SectionEnd(Elf* elf, GElf_Word shndx, Dwarf_Addr bias) {
  if (!elf || shndx == SHN_UNDEF || shndx == SHN_ABS || shndx == SHN_COMMON) return 0;
  Elf_Scn* scn = elf_getscn(elf, shndx);
  GElf_Shdr shdr;
  if (!scn || !gelf_getshdr(scn, &shdr) || !(shdr.sh_flags & SHF_ALLOC)) return 0;
  return shdr.sh_addr + shdr.sh_size + bias;
}

// An offset from base for an entry: capped at the largest (nothing of the
// module lies that far), 0 for a position below base (a limit there names nothing).
uint32_t Offset(uint64_t v, uint64_t base) {
  if (v < base) return 0;
  return v - base > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(v - base);
}

}  // namespace

void SymbolIndex::Build(Dwfl_Module* mod) {
  entries_.clear();
  Dwarf_Addr low = 0;
  dwfl_module_info(mod, nullptr, &low, nullptr, nullptr, nullptr, nullptr, nullptr);
  base_ = low;
  const int n = dwfl_module_getsymtab(mod);
  if (n <= 0) return;
  format::MiVector<Candidate> all;
  all.reserve(static_cast<size_t>(n));
  for (int i = 1; i < n; ++i) {  // entry 0 is the null symbol
    GElf_Sym sym;
    GElf_Addr addr = 0;
    GElf_Word shndx = 0;
    Elf* elf = nullptr;
    Dwarf_Addr bias = 0;
    const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, &elf, &bias);
    if (!name || !name[0] || sym.st_shndx == SHN_UNDEF) continue;
    const int type = GELF_ST_TYPE(sym.st_info);
    if (type == STT_SECTION || type == STT_FILE || type == STT_TLS) continue;
    if (addr < base_ || addr - base_ > UINT32_MAX) continue;  // not in the module: names none of its pcs
    Candidate c;
    c.addr = addr;
    c.size = sym.st_size;
    c.name = name;
    if (sym.st_size == 0) c.limit = SectionEnd(elf, shndx, bias);
    c.binding = BindingRank(sym.st_info);
    c.ndx = i;
    all.push_back(c);
  }
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.addr != b.addr) return a.addr < b.addr;
    return Better(a, b);
  });
  // One entry per address: the first of each run is its best alias.
  size_t distinct = 0;
  for (size_t i = 0; i < all.size(); ++i) distinct += i == 0 || all[i].addr != all[i - 1].addr;
  entries_.reserve(distinct);
  uint64_t reach = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const Candidate& c = all[i];
    if (i > 0 && c.addr == all[i - 1].addr) continue;
    if (c.size != 0) reach = std::max(reach, c.addr + c.size);
    Entry e;
    e.addr = Offset(c.addr, base_);
    e.size = c.size > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(c.size);
    e.reach = Offset(reach, base_);
    e.limit = Offset(c.limit, base_);
    e.name = c.name;
    entries_.push_back(e);
  }
}

SymbolIndex::Match SymbolIndex::Find(uint64_t pc) const {
  // No entry starts below base_, nor past 4 GiB from it.
  if (pc < base_ || entries_.empty()) return Match();
  const uint64_t off = pc - base_;
  // The last symbol starting at or below pc.
  auto it =
      std::upper_bound(entries_.begin(), entries_.end(), off, [](uint64_t v, const Entry& e) { return v < e.addr; });
  if (it == entries_.begin()) return Match();
  const Entry* last = &*(it - 1);
  auto match = [this](const Entry& e) { return Match{base_ + e.addr, e.size, e.name}; };
  // The innermost sized symbol containing pc: the nearest one back whose end
  // passes pc. Symbols rarely nest, so this is usually the first one looked
  // at; `reach` ends the scan as soon as nothing further back can contain pc.
  for (const Entry* e = last; e >= entries_.data() && e->reach > off; --e) {
    if (e->size != 0 && off - e->addr < e->size) return match(*e);
  }
  // No sized symbol contains pc: an assembly label (sizeless) right below it
  // names it, unless a sized symbol ends between the label and pc, or pc is
  // past the end of the label's section (libdw's same-section rule: _end
  // must not name whatever lies beyond the image, such as a JIT's code
  // mapped at a higher address). (A sizeless entry's reach is that of the
  // sized symbols below it.)
  if (last->size == 0 && last->addr >= last->reach && off < last->limit) return match(*last);
  return Match();
}

}  // namespace flightrec::sampler
