// Symbolizer over libdw (see symbolizer.h).
#include "sampler/symbols/symbolizer.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "format/mi_containers.h"
#include "preload/runtime/clock.h"
#include "preload/fds/fd_guard.h"
#include "preload/fds/released_fds.h"
#include "sampler/symbols/build_id_path.h"
#include "sampler/symbols/code_runs.h"
#include "sampler/symbols/code_unloads.h"
#include "sampler/symbols/cu_ranges.h"
#include "sampler/symbols/debug_file_cache.h"
#include "sampler/symbols/elfutils_lazy.h"
#include "preload/stacks/demangle.h"
#include "preload/stacks/local_stack.h"
#include "sampler/symbols/module_elf.h"
#include "sampler/symbols/pc_cache.h"
#include "sampler/symbols/perf_map.h"
#include "sampler/symbols/proc_maps.h"
#include "sampler/symbols/source_pages.h"
#include "sampler/sample_events.h"
#include "sampler/sampler_thread.h"
#include "sampler/symbols/inherited_indexes.h"
#include "sampler/symbols/symbol_index.h"
#include "sampler/symbols/unloaded_code.h"

namespace flightrec::sampler {

namespace {

using format::MiHashMap;
using format::MiString;
using format::MiVector;

struct CachedMapping {
  uint64_t start = 0, end = 0, offset = 0;
  MiString path, build_id;
};

char* const kDebuginfoPath = nullptr;

// A separate debug-info file's descriptor handed to libdw, until
// Symbolizer::Impl::ReleaseDebugFds closes it (see there). The file's
// identity tells whether the number still holds it: libdw closes the fd
// itself when the file turns out unusable.
struct DebugFd {
  Dwfl_Module* mod;
  int fd;
  dev_t dev;
  ino_t ino;
};
// The symbolizing thread's only. Plain data, no destructor: the exiting
// thread runs static destructors while the flush thread may still symbolize.
// A module opens one or two; past the room, an fd simply stays libdw's.
constexpr int kDebugFdRoom = 64;
DebugFd g_debug_fds_to_release[kDebugFdRoom];
int g_debug_fds_pending = 0;

// Local-only separate-debuginfo lookup (/usr/lib/debug/.build-id/xx/rest.debug).
// libdw's dwfl_standard_find_debuginfo also consults debuginfod, which runs
// curl_global_init (and OpenSSL's init) inside the host — seen crashing a
// host at exit after OpenSSL's atexit cleanup — and may reach the network.
// Returning -1 makes libdw use the module's own sections and symtab.
int FindDebuginfoLocalOnly(Dwfl_Module* mod, void**, const char*, Dwarf_Addr, const char*, const char*, GElf_Word,
                           char** debuginfo_file_name) {
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  const int len = dwfl_module_build_id(mod, &bits, &vaddr);
  char path[256];
  if (len < 2 || !bits || !BuildIdDebugPath(bits, static_cast<size_t>(len), path, sizeof(path))) return -1;
  OwnFdChange opening;  // no bulk close between the open and the protection
  // Compressed (a -dbgsym package's): its inflated copy, shared by every
  // process (debug_file_cache.h). The name stays the package's, which
  // libdw resolves a .gnu_debugaltlink against.
  const int fd = debugcache::Substitute(open(path, O_RDONLY | O_CLOEXEC));
  if (fd < 0) return -1;
  *debuginfo_file_name = strdup(path);
  const int owned = AvoidReleasedNumber(TakeOwnFd(fd));
  // Symbolizer::Impl::ReleaseDebugFds closes it once libdw has mapped the file.
  struct stat st;
  if (g_debug_fds_pending < kDebugFdRoom && CloseHookComesFirst() && fstat(owned, &st) == 0)
    g_debug_fds_to_release[g_debug_fds_pending++] = DebugFd{mod, owned, st.st_dev, st.st_ino};
  return owned;
}

const Dwfl_Callbacks kCallbacks = {
    FindElfOwned,
    FindDebuginfoLocalOnly,
    nullptr,
    const_cast<char**>(&kDebuginfoPath),
};

MiString Hex(const unsigned char* bits, int len) {
  MiString s(2 * static_cast<size_t>(len) + 1, '\0');
  BuildIdHex(bits, static_cast<size_t>(len), s.data(), s.size());
  s.pop_back();  // the NUL
  return s;
}

MiString ToMi(const std::string& s) { return MiString(s.data(), s.size()); }

// Source paths in DWARF may be relative to the compilation directory.
MiString JoinPath(const char* dir, const char* file) {
  MiString out;
  if (file[0] != '/' && dir && dir[0]) {
    out = dir;
    if (out.back() != '/') out.push_back('/');
  }
  out += file;
  return out;
}

// Compiler copies of one source function: " [clone .constprop.0]" in
// demangled C++ names, "name.constprop.0", "name.isra.0", "name.part.0",
// "name.cold", ... in plain (C) symbol names. Reports should see the
// function, not the copy. Only GCC's own suffixes are cut: other languages
// use dots inside real names (Go's "main.main").
void StripCloneSuffix(MiString* name) {
  static const char* const kSuffixes[] = {" [clone ", ".constprop.", ".isra.",      ".part.",
                                          ".cold",    ".lto_priv.",  ".localalias", ".clone."};
  size_t cut = MiString::npos;
  for (const char* suffix : kSuffixes) {
    const size_t at = name->find(suffix);
    if (at != MiString::npos && at > 0 && at < cut) cut = at;
  }
  if (cut != MiString::npos) name->resize(cut);
}

MiString DemangleMi(const char* name) {
  MiString s = ToMi(stacks::Demangle(name));
  StripCloneSuffix(&s);
  return s;
}

// An ELF symbol's function name. Versioned symbols come as
// "name@@GLIBC_2.34": the version is not part of the function's name.
MiString FunctionNameOfSymbol(const char* symbol) {
  const char* at = strchr(symbol, '@');
  return at ? DemangleMi(std::string(symbol, static_cast<size_t>(at - symbol)).c_str()) : DemangleMi(symbol);
}

// The declaration a concrete or inlined DIE stands for: follows
// DW_AT_abstract_origin and DW_AT_specification (bounded, in case of cycles).
Dwarf_Die OriginDie(Dwarf_Die* die) {
  Dwarf_Die cur = *die;
  for (int hops = 0; hops < 8; ++hops) {
    Dwarf_Attribute attr;
    Dwarf_Die next;
    if ((dwarf_attr(&cur, DW_AT_abstract_origin, &attr) || dwarf_attr(&cur, DW_AT_specification, &attr)) &&
        dwarf_formref_die(&attr, &next)) {
      cur = next;
      continue;
    }
    break;
  }
  return cur;
}

bool IsNamedScope(int tag) {
  return tag == DW_TAG_namespace || tag == DW_TAG_class_type || tag == DW_TAG_structure_type ||
         tag == DW_TAG_union_type;
}

// "ns::Class::" around the DIE at `target` in its CU: descends from the CU
// only into the child whose offset range holds the target (DW_AT_sibling
// lets libdw skip whole subtrees), instead of visiting every DIE.
MiString ScopePrefix(Dwarf_Die* cu, Dwarf_Off target) {
  MiString prefix;
  Dwarf_Die cur = *cu;
  for (int depth = 0; depth < 32; ++depth) {
    Dwarf_Die child;
    if (dwarf_child(&cur, &child) != 0) break;
    bool descended = false;
    for (;;) {
      const Dwarf_Off off = dwarf_dieoffset(&child);
      if (off == target) return prefix;
      Dwarf_Die next;
      const bool has_next = dwarf_siblingof(&child, &next) == 0;
      if (off < target && (!has_next || target < dwarf_dieoffset(&next))) {
        const int tag = dwarf_tag(&child);
        if (IsNamedScope(tag)) {
          const char* n = dwarf_diename(&child);
          prefix += n ? n : (tag == DW_TAG_namespace ? "(anonymous namespace)" : "(anonymous)");
          prefix += "::";
        }
        cur = child;
        descended = true;
        break;
      }
      if (!has_next) break;
      child = next;
    }
    if (!descended) break;
  }
  return prefix;
}

// Demangled linkage name when there is one (it carries the full qualified
// name and parameter types), else an empty string.
MiString LinkageName(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* linkage = nullptr;
  if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) || dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr))
    linkage = dwarf_formstring(&attr);
  return linkage ? DemangleMi(linkage) : MiString();
}

}  // namespace

struct Symbolizer::Impl {
  Dwfl* dwfl = nullptr;
  ProcMaps maps;
  uint64_t maps_generation = 0;
  uint64_t last_rescan_ns = 0;
  bool initialised = false;
  // The maps or a module's ELF could not be read for want of a descriptor
  // (EMFILE/ENFILE): the next rescan re-reads and re-reports regardless.
  bool fd_starved = false;
  // A pc in a file's mapping had no libdw module (see Resolve): the next
  // rescan re-reports even if the maps look unchanged. Once per mapping
  // start (reported_again), so code libdw cannot place never costs a
  // report per rescan interval.
  bool report_again = false;
  MiHashMap<uint64_t, bool> reported_again;
  PcCache cache;        // one compact answer per pc (pc_cache.h)
  Resolution resolved;  // the answer being found (its vectors' room is reused)
  MiVector<CachedMapping> mappings;
  MiHashMap<uint64_t, int32_t> mapping_by_start;
  MiHashMap<uint64_t, MiString> build_id_by_module;  // keyed by module low address
  MiHashMap<uint64_t, bool> dwarf_loaded;            // module low address -> DWARF used
  // Modules whose DWARF is loaded: module low address -> when it last
  // described a pc. Idle ones are dropped (DropIdleDwarf).
  MiHashMap<uint64_t, uint64_t> dwarf_used_ns;
  // module low address -> how often its DWARF was dropped (kept across
  // reports: each drop doubles the idle time before the next).
  MiHashMap<uint64_t, uint32_t> dwarf_drops;
  uint64_t last_idle_check_ns = 0;
  MiHashMap<uint64_t, SymbolIndex> symbol_indexes;  // module low address -> its ELF symbols
  // module low address -> an index published before a fork (ours or an
  // ancestor's; inherited_indexes.h), or null: none, build our own
  MiHashMap<uint64_t, const SymbolIndex*> inherited_indexes;
  PerfMap perf_map;  // JIT code names (/tmp/perf-PID.map)
  uint64_t last_perf_map_ns = 0;
  // module low address -> where its PT_LOAD segments lie ([lo, hi) pairs)
  MiHashMap<uint64_t, MiVector<std::pair<uint64_t, uint64_t>>> load_ranges;
  std::atomic<bool> exit_mode{false};
  Stats stats;
  // Unloads (see symbolizer.h): the libraries unloaded so far, when the
  // latest unload returned, and the maps as they were before it was seen.
  UnloadedCode unloaded;
  uint64_t world_start_ns = 0;
  ProcMaps maps_before;

  void UnpublishIndexes() {
    for (const auto& [low, index] : symbol_indexes) UnpublishSymbolIndex(&index);
  }

  ~Impl() {
    UnpublishIndexes();
    if (!dwfl) return;
    {
      ReleasedFdScope scope;  // libdw closes the debug fds released below
      dwfl_end(dwfl);
    }
    ForgetReleasedFds();
    g_debug_fds_pending = 0;
  }

  // One report round: every code run of the snapshot but those starting at
  // an address in leave_out (if given). libdw keeps a module reported again
  // as it was, and frees those left out (with their ELF and DWARF).
  void ReportCodeRuns(const MiVector<uint64_t>* leave_out) {
    dwfl_report_begin(dwfl);
    // From our own snapshot, the one mappings are described from (code_runs.h
    // says why not dwfl_linux_proc_report).
    const int pid = static_cast<int>(getpid());
    ForEachCodeRun(maps, [&](const char* name, uint64_t lo, uint64_t hi) {
      if (leave_out && std::find(leave_out->begin(), leave_out->end(), lo) != leave_out->end()) return;
      if (strcmp(name, "[vdso]") != 0) {
        dwfl_report_module(dwfl, name, lo, hi);
        return;
      }
      char vdso[32];  // the name libdw's find_elf reads the image from memory for
      snprintf(vdso, sizeof(vdso), "[vdso: %d]", pid);
      dwfl_report_module(dwfl, vdso, lo, hi);
    });
    {
      ReleasedFdScope scope;  // modules dropped here close their released debug fds
      dwfl_report_end(dwfl, nullptr, nullptr);
    }
    g_debug_fds_pending = 0;  // their modules may be gone: those fds stay libdw's
  }

  // Drops the DWARF of modules that have described no pc for a while
  // (issue #44). libdw keeps a module's debug information for as long as
  // the module is reported, and a separate debug file with compressed
  // sections (Debian's -dbg and -dbgsym packages) is decompressed whole into
  // malloc'd memory: 3 MiB for libm's, in every process that ever sampled
  // libm, for its whole life. Pcs already described stay in the cache, so
  // an idle module's DWARF serves nothing; the module is reported afresh at
  // once (nothing loaded until a new pc needs it), and a module dropped
  // before waits twice as long the next time, so one that keeps meeting new
  // pcs is reloaded a handful of times, not every few seconds. Not in a
  // process whose children may be using its symbol indexes
  // (inherited_indexes.h), nor in exit mode (nothing is loaded then).
  void DropIdleDwarf(uint64_t now) {
    if (!dwfl || dwarf_used_ns.empty() || exit_mode.load(std::memory_order_relaxed)) return;
    if (now - last_idle_check_ns < kIdleCheckNs) return;
    last_idle_check_ns = now;
    if (SymbolIndexesSharedWithChildren()) return;
    MiVector<uint64_t> idle;
    for (const auto& [low, used_ns] : dwarf_used_ns) {
      auto d = dwarf_drops.find(low);
      const uint32_t drops = d == dwarf_drops.end() ? 0 : std::min<uint32_t>(d->second, kMaxIdleDoublings);
      // (A module used during this tick was stamped after `now` was read.)
      if (used_ns < now && now - used_ns >= (kDwarfIdleNs << drops)) idle.push_back(low);
    }
    if (idle.empty()) return;
    for (uint64_t low : idle) {
      // Unpublished before its module goes: a fork from now on must not find it.
      if (auto it = symbol_indexes.find(low); it != symbol_indexes.end()) {
        UnpublishSymbolIndex(&it->second);
        symbol_indexes.erase(it);
      }
    }
    ReportCodeRuns(&idle);    // frees them
    ReportCodeRuns(nullptr);  // and back, fresh
    for (uint64_t low : idle) {
      dwarf_used_ns.erase(low);
      dwarf_loaded.erase(low);
      build_id_by_module.erase(low);
      inherited_indexes.erase(low);
      load_ranges.erase(low);
      cu_ranges.erase(low);
      dwarf_drops[low]++;
    }
    cu_index.clear();  // keyed by module pointers, which the new modules may reuse
    qualified_names.clear();
    stats.dwarf_dropped += idle.size();
  }

  // Symbol sources' pages (source_pages.h): at most every
  // kSourcePagesEveryNs, and only once libdw resolved a pc since the last
  // time. The files are found as libdw names them (each module's ELF file
  // and separate debug file), their mappings in a fresh read of the maps:
  // the ones libelf makes, whole and private (writable, offset 0), of the
  // same file (inode and resolved path), or of an inflated copy we handed
  // libdw instead of a debug file. And the pages of libdw's own code and
  // data files (elfutils_lazy.h: ElfutilsOnlySpans).
  static constexpr uint64_t kSourcePagesEveryNs = 5'000'000'000;
  uint64_t last_source_pages_ns = 0;
  uint64_t resolves = 0, resolves_at_source_pages = 0;

  void ReleaseSourcePages(uint64_t now) {
    if (!dwfl || resolves == resolves_at_source_pages || exit_mode.load(std::memory_order_relaxed)) return;
    if (now - last_source_pages_ns < kSourcePagesEveryNs) return;
    last_source_pages_ns = now;
    resolves_at_source_pages = resolves;
    MiVector<MiString> names;
    dwfl_getmodules(
        dwfl,
        [](Dwfl_Module* mod, void**, const char*, Dwarf_Addr, void* arg) -> int {
          const char *main = nullptr, *debug = nullptr;
          dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, &main, &debug);
          auto* out = static_cast<MiVector<MiString>*>(arg);
          if (main && main[0] == '/') out->emplace_back(main);
          if (debug && debug[0] == '/') out->emplace_back(debug);
          return DWARF_CB_OK;
        },
        &names, 0);
    struct File {
      MiString path;
      uint64_t inode;
    };
    MiVector<File> files;
    for (const MiString& name : names) {
      char* real = realpath(name.c_str(), nullptr);
      struct stat st;
      if (real && stat(real, &st) == 0) files.push_back({MiString(real), static_cast<uint64_t>(st.st_ino)});
      free(real);
    }
    // The code of libdw and the libraries it brought (only our threads run it).
    uint64_t spans[16][2];
    const int own = ElfutilsOnlySpans(spans, 16);
    for (int i = 0; i < own; i++) stats.source_bytes_released += ReleaseCleanFilePages(spans[i][0], spans[i][1]);
    ProcMaps now_maps;
    if (!now_maps.Load()) return;
    for (const MapEntry& m : now_maps.entries()) {
      if (!m.writable || m.executable || m.offset != 0 || m.path.empty() || m.path[0] != '/') continue;
      // An inflated copy of a debug file (debug_file_cache.h): libdw knows
      // it by the name of the file it stands for.
      if (debugcache::IsCopyHandedOut(m.inode)) {
        stats.source_bytes_released += ReleaseCleanFilePages(m.start, m.end);
        continue;
      }
      for (const File& f : files) {
        if (f.inode != m.inode || f.path != m.path) continue;
        stats.source_bytes_released += ReleaseCleanFilePages(m.start, m.end);
        break;
      }
    }
  }

  void Report() {
    if (!dwfl) dwfl = dwfl_begin(&kCallbacks);
    if (!dwfl) {
      // libdw not loaded yet (elfutils_lazy.cc: no descriptor was free):
      // retry with the next miss, as for a module file out of reach.
      fd_starved = true;
      return;
    }
    ReportCodeRuns(nullptr);
    build_id_by_module.clear();
    dwarf_loaded.clear();
    // (dwarf_used_ns stays: a module reported again unchanged keeps its
    // loaded DWARF, and must stay due for dropping.)
    UnpublishIndexes();      // before they go: a fork from now on must not find them
    symbol_indexes.clear();  // names point into the modules just dropped
    inherited_indexes.clear();
    load_ranges.clear();
    cu_index.clear();  // keyed by module pointers, which a re-report may recycle
    cu_ranges.clear();
    qualified_names.clear();
    stats.reports++;
  }

  static bool FdStarved(int err) { return err == EMFILE || err == ENFILE; }
  static bool CanOpenFile() {
    const int fd = OpenTransientFd("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return !FdStarved(errno);
    CloseTransientFd(fd);
    return true;
  }

  void Init() {
    sampler::SlowWorkScope slow;  // the maps read and every module reported
    initialised = true;
    errno = 0;
    if (!maps.Load() && FdStarved(errno)) fd_starved = true;
    maps_generation++;
    last_rescan_ns = MonotonicNs();
    Report();
  }

  // Re-reads the maps when pcs we cannot place keep arriving; re-reports the
  // modules only if the code mappings really changed. While fd-starved it
  // retries on every miss (and every Generation() call): a failed open()
  // costs a microsecond, and the pcs described without names meanwhile are
  // only described again once the generation has moved.
  bool MaybeRescan() {
    const uint64_t now = MonotonicNs();
    if (!fd_starved && now - last_rescan_ns < kRescanIntervalNs) return false;
    last_rescan_ns = now;
    stats.rescans++;
    const uint64_t before = maps.code_fingerprint();
    errno = 0;
    if (!maps.Load()) {
      if (FdStarved(errno)) fd_starved = true;
      return false;
    }
    if (maps.code_fingerprint() == before && !fd_starved && !report_again) return false;
    fd_starved = false;
    report_again = false;
    maps_generation++;
    mapping_by_start.clear();  // offsets/paths at a start address may differ now
    Report();
    return true;
  }

  // After a dlclose: the maps now, fresh modules, and no cached answer (the
  // unloaded library's addresses may hold other code by now). Runs before
  // any pc is described, so the generation moves and unnamed pcs are retried.
  void SyncWithUnloads() {
    if (unloaded.Sync(&world_start_ns) == 0 || !initialised) return;  // (Init reads the maps as they are now)
    stats.unload_syncs++;
    maps_before = maps;
    errno = 0;
    if (!maps.Load() && FdStarved(errno)) fd_starved = true;
    last_rescan_ns = MonotonicNs();
    maps_generation++;
    cache.Clear();
    mapping_by_start.clear();
    reported_again.clear();
    Report();
  }

  // pc as the code of a library unloaded since: its symbol and line, from
  // the library's own file.
  bool DescribeUnloaded(const UnloadedObject& u, Dwfl_Module* mod, uint64_t pc, format::MappingInfo* mapping,
                        std::vector<format::FrameLine>* lines) {
    *mapping = format::MappingInfo{};
    mapping->start = u.lo;
    mapping->end = u.hi;
    mapping->file_offset = 0;  // lo is the first PT_LOAD's page, which linkers put at file offset 0
    mapping->path = u.path;
    lines->clear();
    if (!mod) return true;
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    const int len = dwfl_module_build_id(mod, &bits, &vaddr);
    if (len > 0) mapping->build_id.assign(Hex(bits, len).c_str());
    format::FrameLine fl;
    GElf_Off offset = 0;
    GElf_Sym sym;
    if (const char* name = dwfl_module_addrinfo(mod, pc, &offset, &sym, nullptr, nullptr, nullptr)) {
      const MiString fn = FunctionNameOfSymbol(name);
      fl.function.assign(fn.data(), fn.size());
    }
    Dwarf_Addr bias = 0;
    Dwarf_Die cu_storage;
    MiString file;
    uint32_t line = 0;
    LineOf(CuOf(mod, pc, &bias, &cu_storage), pc - bias, &file, &line);
    fl.file.assign(file.data(), file.size());
    fl.line = line;
    if (!fl.function.empty() || !fl.file.empty()) lines->push_back(std::move(fl));
    return true;
  }

  static bool SameMapping(const MapEntry& a, const MapEntry& b) {
    return a.start == b.start && a.end == b.end && a.offset == b.offset && a.inode == b.inode && a.path == b.path;
  }
  static bool IsFileBacked(const MapEntry& m) { return !m.path.empty() && m.path[0] == '/'; }

  // libdw's module for pc, if pc is in its image.
  Dwfl_Module* ModuleAt(uint64_t pc) {
    Dwfl_Module* mod = dwfl ? dwfl_addrmodule(dwfl, pc) : nullptr;
    return mod && InImage(mod, pc) ? mod : nullptr;
  }

  // Whether pc lies in one of mod's own PT_LOAD segments. A module spans
  // its image's mappings and the anonymous memory between them
  // (code_runs.h), where a JIT's code may lie; those pcs must not take the
  // nearest symbol of the image (they came out as "_end"). An image whose
  // ELF cannot be read is trusted.
  bool InImage(Dwfl_Module* mod, uint64_t pc) {
    Dwarf_Addr low = 0;
    dwfl_module_info(mod, nullptr, &low, nullptr, nullptr, nullptr, nullptr, nullptr);
    auto it = load_ranges.find(low);
    if (it == load_ranges.end()) {
      MiVector<std::pair<uint64_t, uint64_t>> ranges;
      Dwarf_Addr bias = 0;
      Elf* elf = dwfl_module_getelf(mod, &bias);
      size_t n = 0;
      if (elf && elf_getphdrnum(elf, &n) == 0) {
        for (size_t i = 0; i < n; ++i) {
          GElf_Phdr ph;
          if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD)
            ranges.emplace_back(ph.p_vaddr + bias, ph.p_vaddr + ph.p_memsz + bias);
        }
      }
      it = load_ranges.emplace(low, std::move(ranges)).first;
    }
    if (it->second.empty()) return true;
    for (const auto& [lo, hi] : it->second)
      if (pc >= lo && pc < hi) return true;
    return false;
  }

  // Code in anonymous memory is a JIT's: named by the runtime's
  // perf map if it writes one. Re-read (what was appended) on a miss, at most
  // every kRescanIntervalNs; new names move the generation so pcs written
  // unnamed are asked about again. While the map exists, a pc it does not
  // name yet stays retryable (its line may be on its way).
  void NameJitCode(uint64_t pc, Resolution* e) {
    const char* name = perf_map.Find(pc);
    const uint64_t now = MonotonicNs();
    if (!name && (last_perf_map_ns == 0 || now - last_perf_map_ns >= kRescanIntervalNs)) {
      last_perf_map_ns = now;
      if (perf_map.Refresh()) maps_generation++;
      name = perf_map.Find(pc);
    }
    if (name) {
      ResolvedFrame f;
      f.function = name;
      e->frames.push_back(std::move(f));
    } else if (perf_map.present()) {
      e->transient = true;
    }
  }

  const MiString& BuildId(Dwfl_Module* mod) {
    Dwarf_Addr low = 0;
    dwfl_module_info(mod, nullptr, &low, nullptr, nullptr, nullptr, nullptr, nullptr);
    auto it = build_id_by_module.find(low);
    if (it != build_id_by_module.end()) return it->second;
    Dwarf_Addr bias = 0;
    dwfl_module_getelf(mod, &bias);  // build-id is known once the ELF is loaded
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    const int len = dwfl_module_build_id(mod, &bits, &vaddr);
    return build_id_by_module.emplace(low, len > 0 ? Hex(bits, len) : MiString()).first->second;
  }

  int32_t MappingFor(const MapEntry& m, Dwfl_Module* mod) {
    auto it = mapping_by_start.find(m.start);
    if (it != mapping_by_start.end()) return it->second;
    CachedMapping cm;
    cm.start = m.start;
    cm.end = m.end;
    cm.offset = m.offset;
    cm.path = m.path;
    if (mod) cm.build_id = BuildId(mod);
    const int32_t idx = static_cast<int32_t>(mappings.size());
    mappings.push_back(std::move(cm));
    mapping_by_start.emplace(m.start, idx);
    return idx;
  }

  // ELF symbol covering pc (.symtab, else .dynsym), demangled. Through the
  // module's SymbolIndex, built on its first such lookup (symbol_index.h says
  // why not dwfl_module_addrinfo).
  MiString SymbolName(Dwfl_Module* mod, uint64_t pc) {
    Dwarf_Addr low = 0;
    dwfl_module_info(mod, nullptr, &low, nullptr, nullptr, nullptr, nullptr, nullptr);
    const SymbolIndex* index = nullptr;
    if (auto own = symbol_indexes.find(low); own != symbol_indexes.end()) {
      index = &own->second;
    } else if (auto in = inherited_indexes.find(low); in != inherited_indexes.end() && in->second) {
      index = in->second;
    } else {
      // A module forked from the parent with the same file at the same
      // place: its published index, shared with the parent (no copy).
      Dwarf_Addr high = 0;
      const char* name = dwfl_module_info(mod, nullptr, nullptr, &high, nullptr, nullptr, nullptr, nullptr);
      const MapEntry* m = maps.Find(low);
      const ModuleIdentity id = MakeModuleIdentity(name, low, high, m ? m->inode : 0);
      const SymbolIndex* published = m && m->inode ? FindPublishedSymbolIndex(id) : nullptr;
      inherited_indexes[low] = published;
      if (published) {
        index = published;
        stats.symbol_tables_inherited++;
      } else {
        auto it = symbol_indexes.try_emplace(low).first;
        it->second.Build(mod);
        stats.symbol_tables++;
        index = &it->second;
        if (m && m->inode) PublishSymbolIndex(id, index);
      }
    }
    const SymbolIndex::Match sym = index->Find(pc);
    if (!sym) return MiString();
    return FunctionNameOfSymbol(sym.name);
  }

  // Where a module's answers do not depend on the pc within a function, the
  // function's key: a module whose DWARF is not read (or that has none)
  // names a pc after the ELF symbol holding it, or, with none, after the
  // unwind tables' function (CfiFunctionName); every pc of that function
  // gets the same answer. (A symbol whose name demangles to nothing is
  // named from the unwind tables, by its first pc's function.) So
  // such answers are cached once per function, not once per pc: a busy
  // process keeps meeting new pcs of the same hot functions (every sampled
  // instruction is one), and per pc the cache grew for as long as it ran
  // (issue #44). 0 where the answer is the pc's own (DWARF lines, JIT
  // code, no module, a module not looked at yet). The tag bits keep the
  // keys apart from pcs (user-space addresses stay below 2^56).
  static constexpr uint64_t kSymbolKey = 1ull << 63, kCfiKey = 1ull << 62;
  uint64_t FunctionKey(uint64_t pc) {
    Dwfl_Module* mod = ModuleAt(pc);
    if (!mod) return 0;
    Dwarf_Addr low = 0;
    dwfl_module_info(mod, nullptr, &low, nullptr, nullptr, nullptr, nullptr, nullptr);
    auto loaded = dwarf_loaded.find(low);
    if (loaded == dwarf_loaded.end()) return 0;
    // DWARF judged affordable, but the module has none (a stripped binary
    // without a debug file, as Debian's postgres): named as without it.
    // (Resolve has tried to load it by now: this loads nothing.)
    Dwarf_Addr bias = 0;
    if (loaded->second && dwfl_module_getdwarf(mod, &bias)) return 0;
    const SymbolIndex* index = nullptr;
    if (auto own = symbol_indexes.find(low); own != symbol_indexes.end()) {
      index = &own->second;
    } else if (auto in = inherited_indexes.find(low); in != inherited_indexes.end()) {
      index = in->second;
    }
    if (!index) return 0;  // not built yet: the first pc builds it
    if (const SymbolIndex::Match sym = index->Find(pc)) return kSymbolKey | sym.addr;
    uint64_t start = 0, end = 0;
    if (stacks::LocalFunctionRange(pc, &start, &end)) return kCfiKey | start;
    return 0;
  }

  // A pc no symbol names, in a module without symbols for it (a stripped
  // binary's static functions): the function that holds it is still known
  // from the unwind tables (.eh_frame, which even stripped binaries keep:
  // one FDE per function). Named "sub_<address> (<module>)", the address
  // being the function's start as objdump shows it, so a profile counts the
  // function once instead of once per sampled instruction. Empty when no FDE
  // covers pc.
  static MiString CfiFunctionName(Dwfl_Module* mod, uint64_t pc, const format::MiString& path) {
    uint64_t start = 0, end = 0;
    Dwarf_Addr bias = 0;
    if (!stacks::LocalFunctionRange(pc, &start, &end) || !dwfl_module_getelf(mod, &bias) || start < bias)
      return MiString();
    char name[64];
    snprintf(name, sizeof(name), "sub_%llx", static_cast<unsigned long long>(start - bias));
    MiString out(name);
    const size_t slash = path.rfind('/');
    if (!path.empty()) {
      out += " (";
      out += slash == MiString::npos ? path : path.substr(slash + 1);
      out += ")";
    }
    return out;
  }

  // Whether to read a module's DWARF at all. libdw 0.188 inflates every
  // compressed debug section of a file when it opens its DWARF: for a big
  // compressed separate debug file (distro -dbg/-dbgsym packages) that is
  // 100s of ms of CPU and tens of MB inside the host. Uncompressed DWARF is
  // mapped and paged in lazily, so it is always used; compressed DWARF only
  // up to kMaxCompressedDebugBytes. Otherwise the symbol tables name the
  // functions (no file:line). Checked once per module.
  static constexpr uint64_t kMaxCompressedDebugBytes = 2u << 20;

  // Exit mode (see symbolizer.h) still reads DWARF that costs next to
  // nothing: uncompressed debug sections of at most this many bytes in all
  // (a plugin or a small program first sampled just before exit).
  static constexpr uint64_t kExitModeDebugBytes = 4u << 20;

  struct DebugSize {
    bool has_info = false;    // holds .debug_info (compressed or not)
    uint64_t compressed = 0;  // bytes of compressed debug sections
    uint64_t total = 0;       // bytes of all debug sections
  };

  static void AddDebugSize(Elf* elf, DebugSize* size) {
    size_t shstrndx = 0;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0) return;
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh)) continue;
      const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
      if (!name) continue;
      const bool zdebug = strncmp(name, ".zdebug_", 8) == 0;
      if (strncmp(name, ".debug_", 7) != 0 && !zdebug) continue;
      if (!strcmp(name + (zdebug ? 7 : 6), "_info")) size->has_info = true;
      if (zdebug || (sh.sh_flags & SHF_COMPRESSED)) size->compressed += sh.sh_size;
      size->total += sh.sh_size;
    }
  }

  static bool Affordable(const DebugSize& size, bool exit_mode) {
    if (exit_mode) return size.compressed == 0 && size.total <= kExitModeDebugBytes;
    return size.compressed <= kMaxCompressedDebugBytes;
  }

  bool DwarfAffordable(Dwfl_Module* mod, bool exit_mode) {
    Dwarf_Addr bias = 0;
    DebugSize size;
    if (Elf* main = dwfl_module_getelf(mod, &bias)) {
      AddDebugSize(main, &size);
      if (size.has_info) return Affordable(size, exit_mode);
    }
    // No DWARF in the file itself: look where libdw will, the build-id path
    // of a separate debug file.
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    const int len = dwfl_module_build_id(mod, &bits, &vaddr);
    char path[256];
    // No build-id: nothing costly will be found.
    if (len < 2 || !BuildIdDebugPath(bits, static_cast<size_t>(len), path, sizeof(path))) return true;
    const int fd = OpenTransientFd(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return true;
    DebugSize separate;
    if (Elf* debug = elf_begin(fd, ELF_C_READ_MMAP, nullptr)) {
      AddDebugSize(debug, &separate);
      elf_end(debug);
    }
    CloseTransientFd(fd);
    return Affordable(separate, exit_mode);
  }

  // Per CU: the pc ranges of its concrete functions, sorted, built once with
  // one walk of the CU's top level (and namespaces/classes). Lookups are a
  // binary search plus a walk of one function's subtree; dwarf_getscopes
  // visits the whole CU on every call (~7 ms per pc in a big C++ CU here).
  struct CuIndex {
    struct Range {
      uint64_t lo, hi;
      Dwarf_Off die;
    };
    MiVector<Range> ranges;
  };
  MiHashMap<uint64_t, CuIndex> cu_index;          // key: CuKey(module, CU)
  MiHashMap<uint64_t, CuRanges> cu_ranges;        // module low address -> its units' ranges
  MiHashMap<uint64_t, MiString> qualified_names;  // key: CuKey(module, DIE)

  static uint64_t CuKey(Dwfl_Module* mod, Dwarf_Off off) {
    return reinterpret_cast<uintptr_t>(mod) * 0x9E3779B97F4A7C15ull ^ off;
  }

  static void IndexChildren(Dwarf_Die* parent, CuIndex* idx, int depth, sampler::SlowWorkWatch* watch) {
    Dwarf_Die child;
    if (depth > 16 || dwarf_child(parent, &child) != 0) return;
    do {
      watch->Poll();
      const int tag = dwarf_tag(&child);
      if (tag == DW_TAG_subprogram) {
        Dwarf_Addr base = 0, lo = 0, hi = 0;
        ptrdiff_t off = 0;
        while ((off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0)
          if (hi > lo) idx->ranges.push_back({lo, hi, dwarf_dieoffset(&child)});
      } else if (IsNamedScope(tag)) {
        IndexChildren(&child, idx, depth + 1, watch);
      }
    } while (dwarf_siblingof(&child, &child) == 0);
  }

  // A unit whose debug information is this large is read for its first pc
  // (line table, function index) with a helper collecting from the start
  // (SlowWorkScope): Rust's units of 1 MB took 20-240 ms on the niced flush
  // thread of a busy machine, which, once descheduled, cannot start the
  // helper itself in time. Smaller units get one only if indexing them turns
  // out slow (SlowWorkWatch).
  static constexpr Dwarf_Off kLargeUnitBytes = 64 * 1024;

  static bool LargeUnit(Dwarf* dw, Dwarf_Die* cudie) {
    const Dwarf_Off start = dwarf_dieoffset(cudie) - dwarf_cuoffset(cudie);
    Dwarf_Off next = 0;
    size_t header = 0;
    return dwarf_nextcu(dw, start, &next, &header, nullptr, nullptr, nullptr) == 0 && next - start >= kLargeUnitBytes;
  }

  // A unit's first pc, in a large unit: its line table and every function
  // DIE in it are read now.
  bool FirstLookAtLargeUnit(Dwfl_Module* mod, Dwarf* dw, Dwarf_Die* cudie) const {
    return cu_index.find(CuKey(mod, dwarf_dieoffset(cudie))) == cu_index.end() && LargeUnit(dw, cudie);
  }

  const CuIndex& IndexFor(Dwfl_Module* mod, Dwarf_Die* cudie) {
    const uint64_t key = CuKey(mod, dwarf_dieoffset(cudie));
    auto it = cu_index.find(key);
    if (it != cu_index.end()) return it->second;
    CuIndex idx;
    // A unit's first pc: every function DIE in it is read.
    sampler::SlowWorkWatch watch;
    IndexChildren(cudie, &idx, 0, &watch);
    std::sort(idx.ranges.begin(), idx.ranges.end(),
              [](const CuIndex::Range& a, const CuIndex::Range& b) { return a.lo < b.lo; });
    return cu_index.emplace(key, std::move(idx)).first->second;
  }

  static constexpr int kMaxInlineDepth = 32;

  // chain[0] = the concrete function containing rel_pc, then each inlined
  // subroutine it contains at rel_pc, outermost to innermost. Returns count.
  int InlineChain(Dwfl_Module* mod, Dwarf* dw, Dwarf_Die* cudie, uint64_t rel_pc, Dwarf_Die* chain) {
    const CuIndex& idx = IndexFor(mod, cudie);
    auto it = std::upper_bound(idx.ranges.begin(), idx.ranges.end(), rel_pc,
                               [](uint64_t v, const CuIndex::Range& r) { return v < r.lo; });
    if (it == idx.ranges.begin()) return 0;
    --it;
    if (rel_pc >= it->hi || !dwarf_offdie(dw, it->die, &chain[0])) return 0;
    int n = 1;
    Dwarf_Die cur = chain[0];
    for (int depth = 0; depth < 64 && n < kMaxInlineDepth; ++depth) {
      Dwarf_Die child;
      if (dwarf_child(&cur, &child) != 0) break;
      bool found = false;
      do {
        const int tag = dwarf_tag(&child);
        if ((tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block || tag == DW_TAG_try_block ||
             tag == DW_TAG_catch_block) &&
            dwarf_haspc(&child, rel_pc) == 1) {
          if (tag == DW_TAG_inlined_subroutine) chain[n++] = child;
          cur = child;
          found = true;
          break;
        }
      } while (dwarf_siblingof(&child, &child) == 0);
      if (!found) break;
    }
    return n;
  }

  // "ns::Class::name" (no parameter types) for a function DIE without a
  // linkage name, e.g. one with internal linkage; cached per declaration.
  MiString QualifiedName(Dwfl_Module* mod, Dwarf_Die* die) {
    const char* base = dwarf_diename(die);
    if (!base) return MiString();
    Dwarf_Die origin = OriginDie(die);
    const uint64_t key = CuKey(mod, dwarf_dieoffset(&origin));
    auto it = qualified_names.find(key);
    if (it != qualified_names.end()) return it->second;
    MiString name;
    Dwarf_Die cu;
    if (dwarf_diecu(&origin, &cu, nullptr, nullptr)) name = ScopePrefix(&cu, dwarf_dieoffset(&origin));
    name += base;
    qualified_names.emplace(key, name);
    return name;
  }

  // The compile unit holding pc. libdw's answer comes from .debug_aranges
  // alone, which can be partial (cu_ranges.h: Go); a unit that does not
  // hold pc is replaced from the units' own ranges when one does.
  Dwarf_Die* CuOf(Dwfl_Module* mod, uint64_t pc, Dwarf_Addr* bias, Dwarf_Die* storage) {
    Dwarf_Die* cudie = dwfl_module_addrdie(mod, pc, bias);
    if (cudie != nullptr && dwarf_haspc(cudie, pc - *bias) > 0) return cudie;
    Dwarf_Addr dw_bias = 0;
    Dwarf* dw = dwfl_module_getdwarf(mod, &dw_bias);
    if (dw == nullptr) return cudie;
    Dwarf_Addr low = 0;
    dwfl_module_info(mod, nullptr, &low, nullptr, nullptr, nullptr, nullptr, nullptr);
    auto it = cu_ranges.find(low);
    if (it == cu_ranges.end()) {
      it = cu_ranges.emplace(low, CuRanges()).first;
      it->second.Build(dw);
    }
    if (!it->second.Find(dw, pc - dw_bias, storage)) return cudie;
    *bias = dw_bias;
    return storage;
  }

  // pc's source file (joined with the unit's directory) and line, from
  // the line table of the unit holding it.
  static void LineOf(Dwarf_Die* cudie, uint64_t dwarf_pc, MiString* file, uint32_t* line) {
    Dwarf_Line* l = cudie ? dwarf_getsrc_die(cudie, dwarf_pc) : nullptr;
    if (l == nullptr) return;
    Dwarf_Attribute attr;
    const char* comp_dir = dwarf_formstring(dwarf_attr(cudie, DW_AT_comp_dir, &attr));
    if (const char* f = dwarf_linesrc(l, nullptr, nullptr)) *file = JoinPath(comp_dir, f);
    int lineno = 0;
    dwarf_lineno(l, &lineno);
    *line = lineno > 0 ? static_cast<uint32_t>(lineno) : 0;
  }

  void DwarfFrames(Dwfl_Module* mod, uint64_t pc, MiVector<ResolvedFrame>* out) {
    Dwarf_Addr bias = 0;
    Dwarf_Die cu_storage;
    Dwarf_Die* cudie = CuOf(mod, pc, &bias, &cu_storage);
    Dwarf_Addr dw_bias = 0;
    Dwarf* dw = cudie ? dwfl_module_getdwarf(mod, &dw_bias) : nullptr;
    std::optional<sampler::SlowWorkScope> large;
    if (dw && FirstLookAtLargeUnit(mod, dw, cudie)) large.emplace();
    // Innermost location from the line table.
    MiString file;
    uint32_t line = 0;
    LineOf(cudie, pc - bias, &file, &line);
    Dwarf_Attribute comp_dir_attr;
    const char* comp_dir = cudie ? dwarf_formstring(dwarf_attr(cudie, DW_AT_comp_dir, &comp_dir_attr)) : nullptr;
    Dwarf_Die chain[kMaxInlineDepth];
    const int n = dw ? InlineChain(mod, dw, cudie, pc - bias, chain) : 0;
    Dwarf_Files* files = nullptr;
    size_t nfiles = 0;
    bool have_files = false;
    for (int i = n - 1; i >= 0; --i) {  // innermost first
      Dwarf_Die* die = &chain[i];
      ResolvedFrame f;
      f.function = LinkageName(die);
      // The physical function without a linkage name: the ELF symbol has
      // the full demangled form (C++ parameters); else the DWARF scopes.
      if (f.function.empty() && i == 0) f.function = SymbolName(mod, pc);
      if (f.function.empty()) f.function = QualifiedName(mod, die);
      f.file = file;
      f.line = line;
      out->push_back(std::move(f));
      if (i == 0) break;
      // The next frame out is where this copy was inlined: its call site.
      Dwarf_Attribute attr;
      Dwarf_Word v = 0;
      file.clear();
      line = 0;
      if (!have_files) have_files = dwarf_getsrcfiles(cudie, &files, &nfiles) == 0;
      if (have_files && dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &attr), &v) == 0 && v < nfiles) {
        if (const char* cf = dwarf_filesrc(files, v, nullptr, nullptr)) file = JoinPath(comp_dir, cf);
      }
      if (dwarf_formudata(dwarf_attr(die, DW_AT_call_line, &attr), &v) == 0) line = static_cast<uint32_t>(v);
    }
    if (out->empty() || out->back().function.empty()) {
      // No DWARF function for this pc (stripped, or no CU covers it): use
      // the ELF symbol table, keeping whatever line info we found.
      MiString name = SymbolName(mod, pc);
      if (!name.empty()) {
        if (out->empty()) {
          ResolvedFrame f;
          f.file = file;
          f.line = line;
          out->push_back(std::move(f));
        }
        out->back().function = std::move(name);
      }
    }
  }

  // A separate debug-info file libdw opened (FindDebuginfoLocalOnly) would
  // hold a descriptor of the host's until the module is dropped, and
  // libdw's callback cannot take an Elf instead. So once libdw has mapped
  // the file, libelf is told it is done with the descriptor (ELF_C_FDREAD)
  // through every Elf libdw made of it (the symbol table's file, the DWARF's
  // and its alternate's, whichever are not the module's own file), the
  // descriptor is closed, and its number is listed as released
  // (preload/fds/released_fds.h): libdw's own close of it later is swallowed.
  // DWARF is only asked for where it is in use: asking would load DWARF
  // judged too costly.
  void ReleaseDebugFds() {
    DebugFd todo[kDebugFdRoom];
    const int n = g_debug_fds_pending;
    std::copy(g_debug_fds_to_release, g_debug_fds_to_release + n, todo);
    g_debug_fds_pending = 0;  // asking libdw below may add entries
    for (int k = 0; k < n; k++) {
      const DebugFd& d = todo[k];
      Dwarf_Addr low = 0, bias = 0;
      dwfl_module_info(d.mod, nullptr, &low, nullptr, nullptr, nullptr, nullptr, nullptr);
      Elf* main = dwfl_module_getelf(d.mod, &bias);
      Elf* from[3] = {};
      if (dwfl_module_getsymtab(d.mod) > 1) {
        GElf_Sym sym;
        GElf_Addr addr = 0;
        GElf_Word shndx = 0;
        dwfl_module_getsym_info(d.mod, 1, &sym, &addr, &shndx, &from[0], &bias);
      }
      auto used = dwarf_loaded.find(low);
      if (used != dwarf_loaded.end() && used->second) {
        if (Dwarf* dw = dwfl_module_getdwarf(d.mod, &bias)) {
          from[1] = dwarf_getelf(dw);
          Dwarf* alt = dwarf_getalt(dw);
          from[2] = alt ? dwarf_getelf(alt) : nullptr;
        }
      }
      bool any = false, done = true;
      for (int i = 0; i < 3; i++) {
        Elf* e = from[i];
        // (Usually one Elf serves symbols and DWARF; a second FDREAD of it
        // would fail: libelf no longer has a descriptor for it.)
        if (!e || e == main || (i > 0 && e == from[0]) || (i > 1 && e == from[1])) continue;
        any = true;
        done = done && elf_cntl(e, ELF_C_FDREAD) == 0;
      }
      if (!any || !done) continue;
      struct stat st;
      if (fstat(d.fd, &st) != 0 || st.st_dev != d.dev || st.st_ino != d.ino) continue;
      if (!ListReleasedFd(d.fd)) continue;
      CloseOwnFd(d.fd);  // outside a ReleasedFdScope: really closed
      stats.debug_fds_released++;
    }
  }

  void Resolve(uint64_t pc, Resolution* e) {
    resolves++;
    const MapEntry* m = maps.Find(pc);
    Dwfl_Module* mod = ModuleAt(pc);
    if ((!m || (!mod && IsFileBacked(*m)) || fd_starved) && MaybeRescan()) {
      m = maps.Find(pc);
      mod = ModuleAt(pc);
    }
    e->maps_generation = maps_generation;
    e->frames.clear();
    e->mapping = -1;
    e->transient = false;
    if (!m) return;
    // No module for a pc in a file's mapping: the snapshot was taken while
    // a library was being mapped (/proc/PID/maps is not read atomically; a
    // library half-mapped has no executable mapping yet) or libdw could not
    // take it then. Read and report again once for that mapping, rather
    // than cache the pc unnamed for good.
    if (!mod && IsFileBacked(*m) && reported_again.emplace(m->start, true).second) {
      report_again = true;
      e->transient = true;
    }
    // The first pc of a module (or the first since its DWARF was let go):
    // its ELF and perhaps its DWARF are read now, which may take long.
    std::optional<sampler::SlowWorkScope> slow;
    if (mod) {
      Dwarf_Addr module_low = 0;
      dwfl_module_info(mod, nullptr, &module_low, nullptr, nullptr, nullptr, nullptr, nullptr);
      if (dwarf_loaded.find(module_low) == dwarf_loaded.end()) slow.emplace();
    }
    if (mod) {
      // libdw opens the module's file on first use; without a descriptor it
      // remembers the failure, so the modules must be reported afresh later.
      // libdw does not keep errno, so a failure is probed: can we open a file?
      Dwarf_Addr bias = 0;
      if (!dwfl_module_getelf(mod, &bias) && !CanOpenFile()) {
        fd_starved = true;
        e->transient = true;
      }
    }
    e->mapping = MappingFor(*m, mod);
    if (!mod) {
      // (Not only executable mappings: a JIT that keeps W^X, as V8 does,
      // may have flipped the code pages to writable by now.)
      if (m->path.empty() || m->path.rfind("[anon", 0) == 0) NameJitCode(pc, e);
      return;
    }
    Dwarf_Addr low = 0;
    dwfl_module_info(mod, nullptr, &low, nullptr, nullptr, nullptr, nullptr, nullptr);
    auto loaded = dwarf_loaded.find(low);
    if (loaded == dwarf_loaded.end()) {
      // First pc in this module: decide once whether its DWARF is worth it.
      const bool use = DwarfAffordable(mod, exit_mode.load(std::memory_order_relaxed));
      loaded = dwarf_loaded.emplace(low, use).first;
    }
    if (!loaded->second) {
      stats.dwarf_skipped++;
      MiString name = SymbolName(mod, pc);
      if (!name.empty()) {
        ResolvedFrame f;
        f.function = std::move(name);
        e->frames.push_back(std::move(f));
      }
    } else {
      DwarfFrames(mod, pc, &e->frames);
      Dwarf_Addr bias = 0;  // (loaded by now if the module has any: this loads nothing)
      if (dwfl_module_getdwarf(mod, &bias)) dwarf_used_ns[low] = MonotonicNs();
    }
    if (e->frames.empty() || e->frames.back().function.empty()) {
      MiString name = CfiFunctionName(mod, pc, m->path);
      if (!name.empty()) {
        if (e->frames.empty()) e->frames.emplace_back();
        e->frames.back().function = std::move(name);
      }
    }
  }
};

Symbolizer::Symbolizer() : impl_(new Impl()) {}
Symbolizer::~Symbolizer() { delete impl_; }

Symbolizer::Stats Symbolizer::stats() const { return impl_->stats; }

uint64_t Symbolizer::Generation() {
  Impl& s = *impl_;
  s.SyncWithUnloads();
  if (s.initialised && (s.fd_starved || s.report_again)) s.MaybeRescan();
  return s.maps_generation;
}

uint64_t Symbolizer::WorldStart() {
  Impl& s = *impl_;
  s.SyncWithUnloads();
  return s.world_start_ns;
}

uint64_t Symbolizer::EraBefore(uint64_t time_ns) { return impl_->unloaded.EraOf(time_ns); }

bool Symbolizer::DescribeBefore(uint64_t pc, uint64_t era, format::MappingInfo* mapping,
                                std::vector<format::FrameLine>* lines) {
  Impl& s = *impl_;
  s.stats.described_before++;
  Dwfl_Module* mod = nullptr;
  if (const UnloadedObject* u = s.unloaded.Holder(era, pc, &mod)) {
    s.stats.unloaded_named++;
    return s.DescribeUnloaded(*u, mod, pc, mapping, lines);
  }
  // No library unloaded since the event covered pc: what holds it now held
  // it then, if the unloads since are all known and nothing else left (a
  // library unloaded along with the one closed has no record: then the maps
  // before and after the unload differ at pc).
  const MapEntry* then = s.maps_before.Find(pc);
  const MapEntry* now = s.maps.Find(pc);
  if (now && s.unloaded.Complete(era) && (!then || Impl::SameMapping(*then, *now))) return Describe(pc, mapping, lines);
  s.stats.unknown_before++;
  *mapping = format::MappingInfo{};
  lines->clear();
  return false;
}

void Symbolizer::DropIdleDebugInfo(uint64_t now_ns) {
  impl_->DropIdleDwarf(now_ns);
  impl_->ReleaseSourcePages(now_ns);
}

void Symbolizer::SetExitMode(bool on) {
  impl_->exit_mode.store(on, std::memory_order_relaxed);
  if (on) debugcache::StopMakingCopies();
}

bool Symbolizer::Describe(uint64_t pc, format::MappingInfo* mapping, std::vector<format::FrameLine>* lines) {
  Impl& s = *impl_;
  if (pc == kTruncatedStackPc) {  // not code: the mark of a stack cut at its depth limit
    *mapping = format::MappingInfo{};
    lines->assign(1, format::FrameLine{"[truncated]", "", 0});
    return true;
  }
  if (!s.initialised) s.Init();
  // (Unloads are noticed in WorldStart() and Generation(), which the intern
  // tables call before a stack's pcs: never between two pcs of one stack.)
  s.stats.lookups++;
  const PcCache::Entry* e = s.cache.Find(pc);
  // An unknown pc stays cached until the maps change or a rescan is due.
  bool hit = e && ((e->mapping >= 0 && !e->transient) ||
                   (e->maps_generation == s.maps_generation && MonotonicNs() - s.last_rescan_ns < kRescanIntervalNs));
  if (!e) {
    // Cached for its function rather than itself (FunctionKey), if the
    // answer found there is a final one, in the mapping that holds pc.
    if (const uint64_t key = s.FunctionKey(pc)) {
      const PcCache::Entry* f = s.cache.Find(key);
      if (f && f->mapping >= 0 && !f->transient) {
        const CachedMapping& cm = s.mappings[static_cast<size_t>(f->mapping)];
        hit = cm.start <= pc && pc < cm.end;
        if (hit) e = f;
      }
    }
  }
  if (hit) {
    s.stats.cache_hits++;
  } else {
    s.Resolve(pc, &s.resolved);
    uint64_t key = pc;
    if (s.resolved.mapping >= 0 && !s.resolved.transient && s.resolved.frames.size() == 1) {
      if (const uint64_t function = s.FunctionKey(pc)) key = function;
    }
    e = &s.cache.Store(key, s.resolved);
    if (g_debug_fds_pending) s.ReleaseDebugFds();
  }
  lines->clear();
  if (e->mapping < 0) {
    s.stats.unknown++;
    return false;
  }
  const CachedMapping& cm = s.mappings[static_cast<size_t>(e->mapping)];
  mapping->start = cm.start;
  mapping->end = cm.end;
  mapping->file_offset = cm.offset;
  mapping->path.assign(cm.path.data(), cm.path.size());
  mapping->build_id.assign(cm.build_id.data(), cm.build_id.size());
  const PcCache::Frame* frames = s.cache.FramesOf(*e);
  for (uint16_t i = 0; i < e->frame_count; i++) {
    format::FrameLine fl;
    const std::string_view function = s.cache.Text(frames[i].function), file = s.cache.Text(frames[i].file);
    fl.function.assign(function.data(), function.size());
    fl.file.assign(file.data(), file.size());
    fl.line = frames[i].line;
    lines->push_back(std::move(fl));
  }
  return true;
}

}  // namespace flightrec::sampler
