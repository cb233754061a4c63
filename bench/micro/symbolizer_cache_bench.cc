// What the symbolizer keeps per pc it has described (issue #44): a
// long-lived process keeps meeting new pcs (every sampled instruction of a
// hot function is one) and keeps every answer, so this is memory that grows
// with a process's age. Describes N distinct pcs (every 7th byte) of
//   libc      its symbol table only (Debian's libc has no DWARF here), and
//   dwarf     this program's own code, compiled with -g (names, files, lines
//             and inline chains from DWARF),
// after a warm-up that loads the module, and prints the growth of VmRSS per
// pc. For libc that is the cache alone; for `dwarf` it also holds what libdw
// reads of each compile unit the first time one of its pcs is described
// (the same for any layout of the cache).
//     symbolizer_cache_bench [N]
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sampler/symbols/symbolizer.h"

namespace {

long RssKb() {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long kb = 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
  fclose(f);
  return kb;
}

void Measure(const char* what, uintptr_t lo, int n) {
  flightrec::sampler::Symbolizer s;
  flightrec::format::MappingInfo m;
  std::vector<flightrec::format::FrameLine> lines;
  constexpr int kWarm = 2000;  // loads libdw, the module and its symbol index
  for (int i = 0; i < kWarm; i++) s.Describe(lo + 7 * i, &m, &lines);
  const long before = RssKb();
  size_t named = 0, frames = 0;
  for (int i = kWarm; i < kWarm + n; i++) {
    s.Describe(lo + 7 * static_cast<uintptr_t>(i), &m, &lines);
    named += !lines.empty() && !lines[0].function.empty();
    frames += lines.size();
  }
  const long grown = RssKb() - before;
  printf("  %-6s %d pcs (%zu named, %.2f frames each): VmRSS +%ld KiB, %.0f bytes per pc\n", what, n, named,
         static_cast<double>(frames) / n, grown, grown * 1024.0 / n);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 50000;
  printf("symbolizer cache: memory per described pc\n");
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&fopen), &info) && info.dli_fbase)
    Measure("libc", reinterpret_cast<uintptr_t>(&fopen) & ~uintptr_t{0xffff}, n);
  // Our own text, past main's page: the core archive's code, with DWARF.
  Measure("dwarf", (reinterpret_cast<uintptr_t>(&main) + 0x10000) & ~uintptr_t{0xfff}, n);
  return 0;
}
