// Unit tests for sampler/symbols/proc_maps and sampler/symbols/symbolizer: known functions of
// this test binary (names, file:line, inline chains, build-id), libc without
// DWARF, unknown pcs, and a library dlopen'ed after the first lookup.
#include <doctest/doctest.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sampler/symbols/build_id_path.h"
#include "sampler/symbols/proc_maps.h"
#include "sampler/symbols/symbolizer.h"

namespace {

using flightrec::format::FrameLine;
using flightrec::format::MappingInfo;
using flightrec::sampler::Symbolizer;

__attribute__((noinline)) uint64_t ReturnAddress() {
  uint64_t r = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  asm volatile("" : "+r"(r));
  return r;
}

volatile int g_sym_sink;

struct Site {
  uint64_t pc;  // inside the call instruction
  int line;
};

__attribute__((noinline)) Site sampler_symbolizer_target(int k) {
  g_sym_sink = k;
  Site s{ReturnAddress() - 1, __LINE__};
  g_sym_sink = k + 1;
  return s;
}

__attribute__((always_inline)) inline Site sampler_inlined_callee(int k) {
  g_sym_sink = k * 3;
  Site s{ReturnAddress() - 1, __LINE__};
  return s;
}

__attribute__((noinline)) Site sampler_inline_outer(int k, int* call_line) {
  g_sym_sink = k;
  *call_line = __LINE__ + 1;
  Site s = sampler_inlined_callee(k);
  g_sym_sink = k + 2;
  return s;
}

std::string Basename(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The main program's GNU build-id, read from its PT_NOTE in memory.
int FindBuildId(dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (info->dlpi_name && info->dlpi_name[0]) return 0;  // main program has ""
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const auto* desc = reinterpret_cast<const unsigned char*>(name + ((nh->n_namesz + 3) & ~3u));
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        static const char kHex[] = "0123456789abcdef";
        for (unsigned j = 0; j < nh->n_descsz; ++j) {
          out->push_back(kHex[desc[j] >> 4]);
          out->push_back(kHex[desc[j] & 15]);
        }
        return 1;
      }
      p = reinterpret_cast<const char*>(desc) + ((nh->n_descsz + 3) & ~3u);
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("sampler_proc_maps: parses lines with odd paths and finds addresses") {
  flightrec::sampler::ProcMaps maps;
  maps.LoadFromText(
      "7f0000001000-7f0000002000 r-xp 00001000 08:01 1234   /usr/lib/lib with space.so\n"
      "7f0000000000-7f0000001000 r--p 00000000 08:01 1234   /usr/lib/lib with space.so\n"
      "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0      [stack]\n"
      "garbage line\n"
      "7f0000003000-7f0000004000 r-xp 00000000 00:00 0 \n"
      "55aa00000000-55aa00001000 r-xp 00002000 fd:00 99 /tmp/x (deleted)");
  REQUIRE(maps.entries().size() == 5);
  const auto* e = maps.Find(0x7f0000001abc);
  REQUIRE(e);
  CHECK(e->start == 0x7f0000001000);
  CHECK(e->end == 0x7f0000002000);
  CHECK(e->offset == 0x1000);
  CHECK(e->executable);
  CHECK_FALSE(e->writable);
  CHECK(e->inode == 1234);
  CHECK(std::string(e->path.c_str()) == "/usr/lib/lib with space.so");
  CHECK(maps.Find(0x7f0000000fff)->offset == 0);
  CHECK(maps.Find(0x7f0000002000) == nullptr);  // end is exclusive, next starts at 0x3000
  CHECK(maps.Find(0x7f0000003000)->path.empty());
  CHECK(std::string(maps.Find(0x55aa00000010)->path.c_str()) == "/tmp/x (deleted)");
  CHECK(maps.Find(0x10) == nullptr);
  flightrec::sampler::MapEntry bad;
  CHECK_FALSE(flightrec::sampler::ParseMapsLine("", &bad));
  CHECK_FALSE(flightrec::sampler::ParseMapsLine("2000-1000 r-xp 0 0:0 0", &bad));
  CHECK_FALSE(flightrec::sampler::ParseMapsLine("zz-1000 r-xp 0 0:0 0", &bad));

  // Loading our own maps finds this function's code.
  flightrec::sampler::ProcMaps self;
  REQUIRE(self.Load());
  const auto* me = self.Find(reinterpret_cast<uint64_t>(&sampler_symbolizer_target));
  REQUIRE(me);
  CHECK(me->executable);
}

TEST_CASE("sampler_symbolizer: function, file:line, mapping and build-id of a known pc") {
  Symbolizer sym;
  const Site site = sampler_symbolizer_target(1);
  MappingInfo m;
  std::vector<FrameLine> lines;
  REQUIRE(sym.Describe(site.pc, &m, &lines));
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].function == "(anonymous namespace)::sampler_symbolizer_target(int)");
  // Absolute: relative DWARF paths are joined with the compilation directory.
  CHECK(lines[0].file.front() == '/');
  CHECK(lines[0].file.size() >= std::strlen(__FILE__));
  CHECK(lines[0].file.compare(lines[0].file.size() - std::strlen(__FILE__), std::string::npos, __FILE__) == 0);
  CHECK(lines[0].line == static_cast<uint32_t>(site.line));

  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(n > 0);
  exe[n] = 0;
  CHECK(m.path == exe);
  CHECK(m.start <= site.pc);
  CHECK(site.pc < m.end);
  std::string build_id;
  dl_iterate_phdr(FindBuildId, &build_id);
  REQUIRE(!build_id.empty());
  CHECK(m.build_id == build_id);

  // Cached: the same answer again, from the cache.
  const auto before = sym.stats();
  std::vector<FrameLine> again;
  MappingInfo m2;
  REQUIRE(sym.Describe(site.pc, &m2, &again));
  CHECK(sym.stats().cache_hits == before.cache_hits + 1);
  CHECK(again[0].function == lines[0].function);
  CHECK(m2.build_id == m.build_id);
}

TEST_CASE("sampler_symbolizer: inline chain innermost first, with the call site line") {
  Symbolizer sym;
  int call_line = 0;
  const Site site = sampler_inline_outer(2, &call_line);
  MappingInfo m;
  std::vector<FrameLine> lines;
  REQUIRE(sym.Describe(site.pc, &m, &lines));
  REQUIRE(lines.size() == 2);
  // No linkage name for an inlined function with internal linkage: the
  // qualified name comes from the DWARF scopes, without parameter types.
  CHECK(lines[0].function == "(anonymous namespace)::sampler_inlined_callee");
  CHECK(lines[0].file == lines[1].file);
  CHECK(lines[0].line == static_cast<uint32_t>(site.line));
  CHECK(lines[1].function == "(anonymous namespace)::sampler_inline_outer(int, int*)");
  CHECK(lines[1].line == static_cast<uint32_t>(call_line));
  CHECK(Basename(lines[1].file) == "sampler_symbolizer_test.cc");
}

TEST_CASE("sampler_symbolizer: libc symbol without DWARF, and unknown pcs") {
  Symbolizer sym;
  MappingInfo m;
  std::vector<FrameLine> lines;
  void* fn = dlsym(RTLD_DEFAULT, "getpid");
  REQUIRE(fn);
  REQUIRE(sym.Describe(reinterpret_cast<uint64_t>(fn) + 1, &m, &lines));
  CHECK(m.path.find("libc.so") != std::string::npos);
  CHECK(m.build_id.size() >= 16);
  REQUIRE(!lines.empty());
  CHECK(lines.back().function.find("getpid") != std::string::npos);

  lines.clear();
  CHECK_FALSE(sym.Describe(0x10, &m, &lines));
  CHECK(lines.empty());
  CHECK(sym.stats().unknown >= 1);
}

namespace {

// Describes every byte of `symbol` (from `handle`: the library's own, not a
// sanitizer's interceptor of the same name), as a busy program's samples
// land on its instructions, and checks they get one answer, named `want`,
// in a file named `path_part`, resolved once and kept for the function.
// Nothing is checked where the library's DWARF is installed (answers are
// per pc then, with lines).
void CheckOneAnswerPerFunction(void* handle, const char* symbol, const char* want, const char* path_part) {
  void* fn = dlsym(handle, symbol);
  REQUIRE(fn);
  Dl_info info;
  ElfW(Sym)* elf_sym = nullptr;
  REQUIRE(dladdr1(fn, &info, reinterpret_cast<void**>(&elf_sym), RTLD_DL_SYMENT));
  REQUIRE(elf_sym != nullptr);
  const uint64_t start = reinterpret_cast<uint64_t>(fn), size = elf_sym->st_size;
  REQUIRE(size > 64);
  Symbolizer sym;
  MappingInfo m;
  std::vector<FrameLine> lines;
  REQUIRE(sym.Describe(start, &m, &lines));
  REQUIRE(lines.size() == 1);
  if (!lines[0].file.empty()) return;
  const std::string name = lines[0].function;
  CHECK(name.find(want) != std::string::npos);
  const uint64_t hits_before = sym.stats().cache_hits;
  for (uint64_t pc = start + 1; pc < start + size; pc++) {
    REQUIRE(sym.Describe(pc, &m, &lines));
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].function == name);
    CHECK(m.path.find(path_part) != std::string::npos);
  }
  CHECK(sym.stats().cache_hits - hits_before == size - 1);
}

}  // namespace

TEST_CASE("sampler_symbolizer: pcs named from the symbol table share their function's answer") {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(libc);
  CheckOneAnswerPerFunction(libc, "getaddrinfo", "getaddrinfo", "libc.so");
}

TEST_CASE("sampler_symbolizer: pcs of a module without DWARF share their function's answer") {
  // A library with no debug information anywhere (no sections, no debug
  // file installed), as Debian's stripped binaries are: DWARF is judged
  // affordable, found absent, and the symbol table names every pc.
  void* handle = dlopen("libbz2.so.1.0", RTLD_NOW | RTLD_LOCAL);
  if (!handle) return;  // not installed here
  CheckOneAnswerPerFunction(handle, "BZ2_bzCompress", "BZ2_bzCompress", "libbz2");
}

TEST_CASE("sampler_symbolizer: a library dlopen'ed after the first lookup is picked up") {
  Symbolizer sym;
  MappingInfo m;
  std::vector<FrameLine> lines;
  REQUIRE(sym.Describe(sampler_symbolizer_target(3).pc, &m, &lines));  // first scan happens here

  // A library that is on every Debian system but not loaded by this binary.
  const char* const kCandidates[][2] = {{"libexpat.so.1", "XML_ParserCreate"},
                                        {"libuuid.so.1", "uuid_generate"},
                                        {"libbz2.so.1.0", "BZ2_bzCompress"},
                                        {"libffi.so.8", "ffi_call"}};
  void* handle = nullptr;
  const char* symbol = nullptr;
  const char* lib = nullptr;
  for (const auto& c : kCandidates) {
    if (dlopen(c[0], RTLD_NOW | RTLD_NOLOAD)) continue;  // already loaded: proves nothing
    handle = dlopen(c[0], RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      lib = c[0];
      symbol = c[1];
      break;
    }
  }
  REQUIRE(handle);
  void* fn = dlsym(handle, symbol);
  REQUIRE(fn);
  // The rescan is rate-limited; wait out the interval rather than race it.
  usleep(Symbolizer::kRescanIntervalNs / 1000 + 1000);
  lines.clear();
  REQUIRE(sym.Describe(reinterpret_cast<uint64_t>(fn) + 1, &m, &lines));
  CHECK(m.path.find(lib) != std::string::npos);
  REQUIRE(!lines.empty());
  CHECK(lines.back().function == symbol);
  CHECK(sym.stats().reports >= 2);
  dlclose(handle);
}

// Issue #44: a forked child uses the symbol index its parent built for a
// module they share (shared copy-on-write) instead of building its own; one
// the parent dropped is never offered.
namespace {

// In a forked child: describe getpid with a fresh symbolizer. Exit status:
// 0 = named and inherited, 1 = named but built its own, 2 = not named.
int ChildDescribesGetpid() {
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 2;
    {
      Symbolizer child;
      MappingInfo m;
      std::vector<FrameLine> lines;
      void* fn = dlsym(RTLD_DEFAULT, "getpid");
      if (child.Describe(reinterpret_cast<uint64_t>(fn) + 1, &m, &lines) && !lines.empty() &&
          lines.back().function.find("getpid") != std::string::npos) {
        const auto st = child.stats();
        code = st.symbol_tables_inherited >= 1 && st.symbol_tables == 0 ? 0 : 1;
      }
    }
    _exit(code);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("sampler_symbolizer: a forked child inherits the parent's symbol index, not a dropped one") {
  void* fn = dlsym(RTLD_DEFAULT, "getpid");
  REQUIRE(fn);
  {
    Symbolizer parent;
    MappingInfo m;
    std::vector<FrameLine> lines;
    REQUIRE(parent.Describe(reinterpret_cast<uint64_t>(fn) + 1, &m, &lines));
    REQUIRE(parent.stats().symbol_tables + parent.stats().symbol_tables_inherited >= 1);
    CHECK(ChildDescribesGetpid() == 0);
  }
  // The parent's symbolizer is gone (its indexes unpublished before they
  // were freed): a child forked now builds its own.
  CHECK(ChildDescribesGetpid() == 1);
}

TEST_CASE("build-id names: hex digits and the separate debug file's path") {
  using flightrec::sampler::BuildIdDebugPath;
  using flightrec::sampler::BuildIdHex;
  const unsigned char id[] = {0x0a, 0xbc, 0xde, 0xf0, 0x12};
  char hex[11];
  REQUIRE(BuildIdHex(id, 5, hex, sizeof(hex)));
  CHECK(std::string(hex) == "0abcdef012");
  CHECK_FALSE(BuildIdHex(id, 5, hex, 10));  // no room for the NUL
  CHECK(hex[0] == '\0');
  char path[64];
  REQUIRE(BuildIdDebugPath(id, 5, path, sizeof(path)));
  CHECK(std::string(path) == "/usr/lib/debug/.build-id/0a/bcdef012.debug");
  const size_t need = std::string(path).size() + 1;
  char tight[64];
  CHECK(BuildIdDebugPath(id, 5, tight, need));
  CHECK_FALSE(BuildIdDebugPath(id, 5, tight, need - 1));
  CHECK_FALSE(BuildIdDebugPath(id, 1, path, sizeof(path)));  // too short to be a build-id
}
