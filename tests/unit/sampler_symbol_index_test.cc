// Unit tests for sampler/symbols/symbol_index: the sorted index must name every pc
// exactly as libdw's own linear search (dwfl_module_addrinfo) does, checked
// on the real modules of this process (libc, libstdc++, the test binary):
// at the start, the middle and the last byte of their functions, and just
// past their ends.
#include <doctest/doctest.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "sampler/symbols/symbol_index.h"

namespace {

using flightrec::sampler::SymbolIndex;

const Dwfl_Callbacks kProcCallbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr, nullptr};

struct ModuleCheck {
  std::string name;
  size_t symbols = 0, probes = 0, named = 0, mismatches = 0;
  std::string first_mismatch;
};

// The pcs to probe: around about 1,000 of the symbols libdw lists, spread
// over the whole table. (Not all: libdw's answer costs ~0.1 ms a pc here,
// which is the reason the index exists.)
std::vector<uint64_t> ProbePcs(Dwfl_Module* mod) {
  std::vector<uint64_t> pcs;
  const int n = dwfl_module_getsymtab(mod);
  const int stride = n > 1000 ? n / 1000 : 1;
  for (int i = 1; i < n; i += stride) {
    GElf_Sym sym;
    GElf_Addr addr = 0;
    if (!dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr)) continue;
    if (sym.st_shndx == SHN_UNDEF) continue;
    if (GELF_ST_TYPE(sym.st_info) != STT_FUNC) continue;
    pcs.push_back(addr);
    if (sym.st_size > 1) {
      pcs.push_back(addr + sym.st_size / 2);
      pcs.push_back(addr + sym.st_size - 1);
    }
    pcs.push_back(addr + sym.st_size);
  }
  return pcs;
}

int CheckModule(Dwfl_Module* mod, void**, const char*, Dwarf_Addr, void* arg) {
  auto* checks = static_cast<std::vector<ModuleCheck>*>(arg);
  const char* name = dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  std::string path = name ? name : "";
  const bool wanted = path.find("libc.so") != std::string::npos || path.find("libstdc++") != std::string::npos ||
                      path.find("unit_tests") != std::string::npos;
  if (!wanted) return DWARF_CB_OK;
  ModuleCheck c;
  c.name = path;
  SymbolIndex index;
  index.Build(mod);
  c.symbols = index.size();
  for (uint64_t pc : ProbePcs(mod)) {
    c.probes++;
    GElf_Off off = 0;
    GElf_Sym sym;
    const char* want = dwfl_module_addrinfo(mod, pc, &off, &sym, nullptr, nullptr, nullptr);
    // The symbolizer's rule on top of libdw's: past a sized symbol is no name.
    if (want && sym.st_size != 0 && off >= sym.st_size) want = nullptr;
    const SymbolIndex::Match got = index.Find(pc);
    bool same;
    if (!want || !got) {
      same = !want && !got;
    } else {
      // Aliases share an address; libdw and the index may order equal
      // candidates differently only if they differ in nothing that ranks them.
      same = got.addr == pc - off && (strcmp(got.name, want) == 0 || got.size == sym.st_size);
    }
    if (got) c.named++;
    if (!same) {
      if (c.mismatches++ == 0) {
        char buf[256];
        snprintf(buf, sizeof(buf), "pc %#lx: libdw %s (+%lu), index %s", static_cast<unsigned long>(pc),
                 want ? want : "(none)", static_cast<unsigned long>(off), got ? got.name : "(none)");
        c.first_mismatch = buf;
      }
    }
  }
  checks->push_back(c);
  return DWARF_CB_OK;
}

// Reports this process's modules to libdw and calls fn on each.
void ForEachModule(int (*fn)(Dwfl_Module*, void**, const char*, Dwarf_Addr, void*), void* arg) {
  Dwfl* dwfl = dwfl_begin(&kProcCallbacks);
  REQUIRE(dwfl);
  dwfl_report_begin(dwfl);
  REQUIRE(dwfl_linux_proc_report(dwfl, getpid()) == 0);
  dwfl_report_end(dwfl, nullptr, nullptr);
  dwfl_getmodules(dwfl, fn, arg, 0);
  dwfl_end(dwfl);
}

}  // namespace

TEST_CASE("sampler_symbol_index: names every pc as libdw's linear search does") {
  std::vector<ModuleCheck> checks;
  ForEachModule(CheckModule, &checks);

  REQUIRE(checks.size() >= 3);
  for (const ModuleCheck& c : checks) {
    INFO(c.name << ": " << c.symbols << " symbols, " << c.probes << " pcs, " << c.named << " named; "
                << c.first_mismatch);
    CHECK(c.symbols > 100);
    CHECK(c.named > c.probes / 2);
    CHECK(c.mismatches == 0);
  }
}

TEST_CASE("sampler_symbol_index: an empty index names nothing") {
  SymbolIndex index;
  CHECK(index.size() == 0);
  CHECK_FALSE(index.Find(0x1000));
}

namespace {
int CheckEnd(Dwfl_Module* mod, void**, const char*, Dwarf_Addr, void* arg) {
  const char* name = dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  if (!name || !strstr(name, "unit_tests")) return DWARF_CB_OK;
  auto* found = static_cast<int*>(arg);
  SymbolIndex index;
  index.Build(mod);
  const int n = dwfl_module_getsymtab(mod);
  for (int i = 1; i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr = 0;
    const char* s = dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr);
    if (!s || strcmp(s, "_end") != 0) continue;
    ++*found;
    // Whatever lies beyond the image (a JIT's code, another mapping) is not
    // "_end + 1 MiB".
    SymbolIndex::Match got = index.Find(addr + (1 << 20));
    CHECK((!got || got.addr > addr));
    got = index.Find(addr + 16);
    CHECK((!got || got.addr > addr));
  }
  return DWARF_CB_OK;
}
}  // namespace

TEST_CASE("sampler_symbol_index: a label names nothing past its section (_end)") {
  int found = 0;
  ForEachModule(CheckEnd, &found);
  CHECK(found == 1);
}
