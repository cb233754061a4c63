// SymbolIndex (see symbol_index.h): build once per module, then binary search.
#include "sampler/symbols/symbol_index.h"

#include <elf.h>
#include <gelf.h>

#include <algorithm>

namespace flightrec::sampler {
namespace {

// A symbol read from the table, with what ranks it among aliases.
struct Candidate {
  SymbolIndex::Symbol sym;
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
  if ((a.sym.size != 0) != (b.sym.size != 0)) return a.sym.size != 0;
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

}  // namespace

void SymbolIndex::Build(Dwfl_Module* mod) {
  symbols_.clear();
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
    Candidate c;
    c.sym.addr = addr;
    c.sym.size = sym.st_size;
    c.sym.name = name;
    if (sym.st_size == 0) c.sym.limit = SectionEnd(elf, shndx, bias);
    c.binding = BindingRank(sym.st_info);
    c.ndx = i;
    all.push_back(c);
  }
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.sym.addr != b.sym.addr) return a.sym.addr < b.sym.addr;
    return Better(a, b);
  });
  // One entry per address: the first of each run is its best alias.
  symbols_.reserve(all.size());
  uint64_t reach = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0 && all[i].sym.addr == all[i - 1].sym.addr) continue;
    Symbol s = all[i].sym;
    if (s.size != 0) reach = std::max(reach, s.addr + s.size);
    s.reach = reach;
    symbols_.push_back(s);
  }
}

const SymbolIndex::Symbol* SymbolIndex::Find(uint64_t pc) const {
  // The last symbol starting at or below pc.
  auto it =
      std::upper_bound(symbols_.begin(), symbols_.end(), pc, [](uint64_t v, const Symbol& s) { return v < s.addr; });
  if (it == symbols_.begin()) return nullptr;
  const Symbol* last = &*(it - 1);
  // The innermost sized symbol containing pc: the nearest one back whose end
  // passes pc. Symbols rarely nest, so this is usually the first one looked
  // at; `reach` ends the scan as soon as nothing further back can contain pc.
  for (const Symbol* s = last; s >= symbols_.data() && s->reach > pc; --s) {
    if (s->size != 0 && pc - s->addr < s->size) return s;
  }
  // No sized symbol contains pc: an assembly label (sizeless) right below it
  // names it, unless a sized symbol ends between the label and pc, or pc is
  // past the end of the label's section (libdw's same-section rule: _end
  // must not name whatever lies beyond the image, such as a JIT's code
  // mapped at a higher address). (A sizeless entry's reach is that of the
  // sized symbols below it.)
  if (last->size == 0 && last->addr >= last->reach && pc < last->limit) return last;
  return nullptr;
}

}  // namespace flightrec::sampler
