// The elfutils functions the symbolizer calls (libdw, libdwfl, libdwelf,
// libelf), defined here as forwarders that load libdw.so.1 with dlopen at
// the first call and resolve the real function from it.
//
// Why: linked, libdw brings libelf, libz, libbz2 and liblzma, and every
// process started under the preload paid their dynamic linking and
// relocation whether it ever named a pc or not (about 0.5 ms of CPU per
// /bin/true on the 2-core VM, bench/run_short_lived.py). Most short-lived
// processes never symbolize: only a process that took a sample does, on the
// flush thread or in its final tick.
//
// Call sites stay ordinary libdw calls: these definitions take the place of
// the library's (the linker finds them first; -fvisibility=hidden and
// preload/exports.map keep them out of the host's symbol scope). The
// compiler checks each signature against the elfutils headers.
//
// It is loaded when the recorder goes live (a process that lived
// FLIGHTREC_FLUSH_MS: a descriptor is more likely free then than when a
// busy server first needs a name), or at the first symbolization before.
//
// Invariants: never called from a signal handler (symbolization runs on the
// flush thread or on a thread that stops it); the library is opened
// RTLD_LOCAL and never closed. While it cannot be loaded every forwarder
// returns the function's own failure value (NULL, -1, ...), which the
// symbolizer already handles as "no symbols". Out of descriptors, the load
// is tried again (at most every 10 ms); any other failure is final, with one line.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>

#include "preload/runtime/clock.h"
#include "preload/runtime/loader_quiesce.h"
#include "sampler/symbols/elfutils_lazy.h"
#include "preload/runtime/log.h"

namespace {

std::atomic<void*> g_handle{nullptr};
std::atomic<bool> g_loading{false};
std::atomic<bool> g_given_up{false};
std::atomic<uint64_t> g_retry_at_ns{0};
// A load that failed for want of a descriptor (a program that used up its
// descriptors) is tried again this much later, quietly.
constexpr uint64_t kRetryNs = 10000000ull;

// dlopen's errno does not say why it failed: a descriptor of our own,
// opened and closed at once, does (raw calls: no hook of ours sees them).
bool OutOfDescriptors() {
  const long fd = syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    syscall(SYS_close, fd);
    return false;
  }
  return errno == EMFILE || errno == ENFILE;
}

// The libraries loading libdw brought in (ElfutilsOnlySpans): the objects
// loaded after the dlopen whose load address was not among those before it.
// Written by the one thread that loads libdw (g_loading), before g_handle is
// published; read after it. (A library the program loads at the same moment
// would be counted as ours: its pages would only be faulted in again.)
constexpr int kMaxObjects = 1024;
constexpr int kMaxOwnSpans = 16;
uint64_t g_bases_before[kMaxObjects];
int g_bases_before_count = 0;
uint64_t g_own_spans[kMaxOwnSpans][2];
int g_own_span_count = 0;

int NoteBaseBefore(dl_phdr_info* info, size_t, void*) {
  if (g_bases_before_count == kMaxObjects) return 1;
  g_bases_before[g_bases_before_count++] = info->dlpi_addr;
  return 0;
}

int NoteIfNew(dl_phdr_info* info, size_t, void*) {
  if (g_own_span_count == kMaxOwnSpans) return 1;
  if (!info->dlpi_name || info->dlpi_name[0] != '/' || info->dlpi_addr == 0) return 0;
  for (int i = 0; i < g_bases_before_count; i++)
    if (g_bases_before[i] == info->dlpi_addr) return 0;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    lo = std::min<uint64_t>(lo, info->dlpi_addr + ph.p_vaddr);
    hi = std::max<uint64_t>(hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
  }
  if (lo >= hi) return 0;
  g_own_spans[g_own_span_count][0] = lo & ~uint64_t{4095};
  g_own_spans[g_own_span_count][1] = hi;
  g_own_span_count++;
  return 0;
}

void* Libdw() {
  if (void* h = g_handle.load(std::memory_order_acquire)) return h;
  if (g_given_up.load(std::memory_order_relaxed)) return nullptr;
  const uint64_t now = flightrec::MonotonicNs();
  if (now < g_retry_at_ns.load(std::memory_order_relaxed)) return nullptr;
  if (g_loading.exchange(true, std::memory_order_acq_rel)) return nullptr;  // another thread is at it
  g_bases_before_count = 0;
  dl_iterate_phdr(NoteBaseBefore, nullptr);
  // libdw.so.1 pulls libelf.so.1 in; dlsym on its handle searches both.
  void* h = flightrec::OwnDlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
  const char* why = h ? nullptr : dlerror();
  const bool transient = !h && OutOfDescriptors();
  // Another file of that name (LD_LIBRARY_PATH) that is not elfutils'. A
  // handle that lacks them stays open: closing a library is never safe for us.
  if (h && (!dlsym(h, "dwfl_begin") || !dlsym(h, "elf_begin"))) {
    why = "it lacks dwfl_begin or elf_begin";
    h = nullptr;
  }
  if (h) {
    if (g_own_span_count == 0) dl_iterate_phdr(NoteIfNew, nullptr);
    g_handle.store(h, std::memory_order_release);
  } else if (transient) {
    g_retry_at_ns.store(now + kRetryNs, std::memory_order_relaxed);
    flightrec::Log(flightrec::LogLevel::kDebug, "cannot load libdw.so.1 yet (%s); trying again",
                   why ? why : "unknown error");
  } else {
    g_given_up.store(true, std::memory_order_relaxed);
    flightrec::Log(flightrec::LogLevel::kWarn, "cannot load libdw.so.1 (%s): sampled functions are not named",
                   why ? why : "unknown error");
  }
  g_loading.store(false, std::memory_order_release);
  return h;
}

// A fork child has only the forking thread: a load another thread had begun
// in the parent is nobody's in the child, and must not keep it from loading
// (test_fork_while_other_threads_allocate: a child's stacks went unnamed).
__attribute__((constructor)) void ResetLoadingInForkChildren() {
  pthread_atfork(nullptr, nullptr, [] { g_loading.store(false, std::memory_order_relaxed); });
}

template <typename Fn>
Fn Resolve(const char* name) {
  void* h = Libdw();
  return h ? reinterpret_cast<Fn>(dlsym(h, name)) : nullptr;
}

}  // namespace

namespace flightrec::sampler {

void LoadElfutils() { Libdw(); }

int ElfutilsOnlySpans(uint64_t (*spans)[2], int max) {
  if (!g_handle.load(std::memory_order_acquire)) return 0;
  int n = 0;
  for (; n < g_own_span_count && n < max; n++) {
    spans[n][0] = g_own_spans[n][0];
    spans[n][1] = g_own_spans[n][1];
  }
  return n;
}

}  // namespace flightrec::sampler

// One forwarder: RET NAME PARAMS { return real(ARGS); } or FAIL while libdw
// (or the function) is missing.
#define FR_ELFUTILS(ret, name, params, args, fail)      \
  extern "C" ret name params {                          \
    using Fn = ret(*) params;                           \
    static std::atomic<Fn> resolved{nullptr};           \
    Fn real = resolved.load(std::memory_order_acquire); \
    if (!real) {                                        \
      real = Resolve<Fn>(#name);                        \
      if (!real) return fail;                           \
      resolved.store(real, std::memory_order_release);  \
    }                                                   \
    return real args;                                   \
  }
#define FR_ELFUTILS_VOID(name, params, args)            \
  extern "C" void name params {                         \
    using Fn = void(*) params;                          \
    static std::atomic<Fn> resolved{nullptr};           \
    Fn real = resolved.load(std::memory_order_acquire); \
    if (!real) {                                        \
      real = Resolve<Fn>(#name);                        \
      if (!real) return;                                \
      resolved.store(real, std::memory_order_release);  \
    }                                                   \
    real args;                                          \
  }

// libdw
FR_ELFUTILS(Dwarf_Attribute*, dwarf_attr, (Dwarf_Die * die, unsigned int search_name, Dwarf_Attribute* result),
            (die, search_name, result), nullptr)
FR_ELFUTILS(Dwarf_Attribute*, dwarf_attr_integrate,
            (Dwarf_Die * die, unsigned int search_name, Dwarf_Attribute* result), (die, search_name, result), nullptr)
FR_ELFUTILS(int, dwarf_child, (Dwarf_Die * die, Dwarf_Die* result), (die, result), -1)
FR_ELFUTILS(Dwarf_Die*, dwarf_diecu,
            (Dwarf_Die * die, Dwarf_Die* result, uint8_t* address_sizep, uint8_t* offset_sizep),
            (die, result, address_sizep, offset_sizep), nullptr)
FR_ELFUTILS(const char*, dwarf_diename, (Dwarf_Die * die), (die), nullptr)
FR_ELFUTILS(Dwarf_Off, dwarf_dieoffset, (Dwarf_Die * die), (die), static_cast<Dwarf_Off>(-1))
FR_ELFUTILS(Dwarf_Off, dwarf_cuoffset, (Dwarf_Die * die), (die), static_cast<Dwarf_Off>(-1))
FR_ELFUTILS(const char*, dwarf_filesrc, (Dwarf_Files * file, size_t idx, Dwarf_Word* mtime, Dwarf_Word* length),
            (file, idx, mtime, length), nullptr)
FR_ELFUTILS(Dwarf_Die*, dwarf_formref_die, (Dwarf_Attribute * attr, Dwarf_Die* die_mem), (attr, die_mem), nullptr)
FR_ELFUTILS(const char*, dwarf_formstring, (Dwarf_Attribute * attrp), (attrp), nullptr)
FR_ELFUTILS(int, dwarf_formudata, (Dwarf_Attribute * attr, Dwarf_Word* return_uval), (attr, return_uval), -1)
FR_ELFUTILS(Dwarf*, dwarf_getalt, (Dwarf * main), (main), nullptr)
FR_ELFUTILS(Elf*, dwarf_getelf, (Dwarf * dwarf), (dwarf), nullptr)
FR_ELFUTILS(Dwarf_Line*, dwarf_getsrc_die, (Dwarf_Die * cudie, Dwarf_Addr addr), (cudie, addr), nullptr)
FR_ELFUTILS(int, dwarf_getsrcfiles, (Dwarf_Die * cudie, Dwarf_Files** files, size_t* nfiles), (cudie, files, nfiles),
            -1)
FR_ELFUTILS(int, dwarf_haspc, (Dwarf_Die * die, Dwarf_Addr pc), (die, pc), -1)
FR_ELFUTILS(int, dwarf_lineno, (Dwarf_Line * line, int* linep), (line, linep), -1)
FR_ELFUTILS(const char*, dwarf_linesrc, (Dwarf_Line * line, Dwarf_Word* mtime, Dwarf_Word* length),
            (line, mtime, length), nullptr)
FR_ELFUTILS(int, dwarf_nextcu,
            (Dwarf * dwarf, Dwarf_Off off, Dwarf_Off* next_off, size_t* header_sizep, Dwarf_Off* abbrev_offsetp,
             uint8_t* address_sizep, uint8_t* offset_sizep),
            (dwarf, off, next_off, header_sizep, abbrev_offsetp, address_sizep, offset_sizep), -1)
FR_ELFUTILS(Dwarf_Die*, dwarf_offdie, (Dwarf * dbg, Dwarf_Off offset, Dwarf_Die* result), (dbg, offset, result),
            nullptr)
FR_ELFUTILS(ptrdiff_t, dwarf_ranges,
            (Dwarf_Die * die, ptrdiff_t offset, Dwarf_Addr* basep, Dwarf_Addr* startp, Dwarf_Addr* endp),
            (die, offset, basep, startp, endp), -1)
FR_ELFUTILS(int, dwarf_siblingof, (Dwarf_Die * die, Dwarf_Die* result), (die, result), -1)
FR_ELFUTILS(int, dwarf_tag, (Dwarf_Die * die), (die), -1)

// libdwelf
FR_ELFUTILS(Elf*, dwelf_elf_begin, (int fd), (fd), nullptr)

// libdwfl
FR_ELFUTILS(Dwfl_Module*, dwfl_addrmodule, (Dwfl * dwfl, Dwarf_Addr address), (dwfl, address), nullptr)
FR_ELFUTILS(Dwfl*, dwfl_begin, (const Dwfl_Callbacks* callbacks), (callbacks), nullptr)
FR_ELFUTILS_VOID(dwfl_end, (Dwfl * dwfl), (dwfl))
FR_ELFUTILS(int, dwfl_linux_proc_find_elf,
            (Dwfl_Module * mod, void** userdata, const char* module_name, Dwarf_Addr base, char** file_name,
             Elf** elfp),
            (mod, userdata, module_name, base, file_name, elfp), -1)
FR_ELFUTILS(Dwarf_Die*, dwfl_module_addrdie, (Dwfl_Module * mod, Dwarf_Addr addr, Dwarf_Addr* bias), (mod, addr, bias),
            nullptr)
FR_ELFUTILS(const char*, dwfl_module_addrinfo,
            (Dwfl_Module * mod, GElf_Addr address, GElf_Off* offset, GElf_Sym* sym, GElf_Word* shndxp, Elf** elfp,
             Dwarf_Addr* bias),
            (mod, address, offset, sym, shndxp, elfp, bias), nullptr)
FR_ELFUTILS(int, dwfl_module_build_id, (Dwfl_Module * mod, const unsigned char** bits, GElf_Addr* vaddr),
            (mod, bits, vaddr), -1)
FR_ELFUTILS(Dwarf*, dwfl_module_getdwarf, (Dwfl_Module * mod, Dwarf_Addr* bias), (mod, bias), nullptr)
FR_ELFUTILS(Elf*, dwfl_module_getelf, (Dwfl_Module * mod, GElf_Addr* bias), (mod, bias), nullptr)
FR_ELFUTILS(const char*, dwfl_module_getsym_info,
            (Dwfl_Module * mod, int ndx, GElf_Sym* sym, GElf_Addr* addr, GElf_Word* shndxp, Elf** elfp,
             Dwarf_Addr* bias),
            (mod, ndx, sym, addr, shndxp, elfp, bias), nullptr)
FR_ELFUTILS(int, dwfl_module_getsymtab, (Dwfl_Module * mod), (mod), -1)
FR_ELFUTILS(ptrdiff_t, dwfl_getmodules,
            (Dwfl * dwfl, int (*callback)(Dwfl_Module*, void**, const char*, Dwarf_Addr, void*), void* arg,
             ptrdiff_t offset),
            (dwfl, callback, arg, offset), -1)
FR_ELFUTILS(const char*, dwfl_module_info,
            (Dwfl_Module * mod, void*** userdata, Dwarf_Addr* start, Dwarf_Addr* end, Dwarf_Addr* dwbias,
             Dwarf_Addr* symbias, const char** mainfile, const char** debugfile),
            (mod, userdata, start, end, dwbias, symbias, mainfile, debugfile), nullptr)
FR_ELFUTILS_VOID(dwfl_report_begin, (Dwfl * dwfl), (dwfl))
FR_ELFUTILS(int, dwfl_report_end,
            (Dwfl * dwfl, int (*removed)(Dwfl_Module*, void*, const char*, Dwarf_Addr, void* arg), void* arg),
            (dwfl, removed, arg), -1)
FR_ELFUTILS(Dwfl_Module*, dwfl_report_module, (Dwfl * dwfl, const char* name, Dwarf_Addr start, Dwarf_Addr end),
            (dwfl, name, start, end), nullptr)

// libelf
FR_ELFUTILS(Elf*, elf_begin, (int fildes, Elf_Cmd cmd, Elf* ref), (fildes, cmd, ref), nullptr)
FR_ELFUTILS(int, elf_cntl, (Elf * elf, Elf_Cmd cmd), (elf, cmd), -1)
FR_ELFUTILS(int, elf_end, (Elf * elf), (elf), 0)
FR_ELFUTILS(int, elf_getphdrnum, (Elf * elf, size_t* dst), (elf, dst), -1)
FR_ELFUTILS(Elf_Scn*, elf_getscn, (Elf * elf, size_t index), (elf, index), nullptr)
FR_ELFUTILS(int, elf_getshdrstrndx, (Elf * elf, size_t* dst), (elf, dst), -1)
FR_ELFUTILS(Elf_Kind, elf_kind, (Elf * elf), (elf), ELF_K_NONE)
FR_ELFUTILS(Elf_Scn*, elf_nextscn, (Elf * elf, Elf_Scn* scn), (elf, scn), nullptr)
FR_ELFUTILS(char*, elf_strptr, (Elf * elf, size_t index, size_t offset), (elf, index, offset), nullptr)
FR_ELFUTILS(GElf_Phdr*, gelf_getphdr, (Elf * elf, int ndx, GElf_Phdr* dst), (elf, ndx, dst), nullptr)
FR_ELFUTILS(GElf_Shdr*, gelf_getshdr, (Elf_Scn * scn, GElf_Shdr* dst), (scn, dst), nullptr)
