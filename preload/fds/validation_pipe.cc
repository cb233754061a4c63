// libunwind's validation pipe without descriptors (see validation_pipe.h):
// the fake numbers, where libunwind's code lies, and the readability check
// that stands in for the kernel's EFAULT.
#include "preload/fds/validation_pipe.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>

#include "preload/crash/raw_syscall.h"
#include "preload/runtime/seccomp_state.h"

namespace flightrec {
namespace {

// The executable segments of libunwind.so.8 and libunwind-x86_64.so.8.
struct CodeRange {
  std::atomic<uintptr_t> lo{0}, hi{0};
};
CodeRange g_libunwind_code[2];

__thread bool t_in_init_scope __attribute__((tls_model("initial-exec"))) = false;

struct FindSegment {
  uintptr_t addr;
  uintptr_t lo = 0, hi = 0;
};

int FindExecSegment(dl_phdr_info* info, size_t, void* arg) {
  auto* f = static_cast<FindSegment*>(arg);
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    const uintptr_t hi = lo + ph.p_memsz;
    if (f->addr >= lo && f->addr < hi) {
      f->lo = lo;
      f->hi = hi;
      return 1;
    }
  }
  return 0;
}

// Readability of one byte per page in [addr, addr + n), by the kernel's copy
// from our own memory: process_vm_readv on ourselves; where a sandbox refuses
// that, rt_sigprocmask with an invalid `how`, which copies the 8-byte set in
// (EFAULT if it cannot) before it rejects `how` (EINVAL), changing nothing.
// That second form is checked once against a known answer before it is
// trusted; without either, every address is unreadable (unwinding stops at
// a doubted frame, nothing faults).
std::atomic<int> g_vm_readv{1};     // 1 usable, 0 refused
std::atomic<int> g_mask_probe{-1};  // -1 untested, 1 usable, 0 not

bool MaskProbeReadable(uintptr_t addr) {
  const long r = RawSyscall6(SYS_rt_sigprocmask, 0x7fffffff, static_cast<long>(addr & ~uintptr_t{7}), 0, 8, 0, 0);
  return r == -EINVAL;
}

bool MaskProbeUsable() {
  int s = g_mask_probe.load(std::memory_order_relaxed);
  if (s < 0) {
    uint64_t here = 0;
    const long unreadable = RawSyscall6(SYS_rt_sigprocmask, 0x7fffffff, 8, 0, 8, 0, 0);
    s = MaskProbeReadable(reinterpret_cast<uintptr_t>(&here)) && unreadable == -EFAULT ? 1 : 0;
    g_mask_probe.store(s, std::memory_order_relaxed);
  }
  return s == 1;
}

bool ByteReadable(uintptr_t addr) {
  // Under a seccomp filter process_vm_readv may kill the process, not fail
  // (seccomp_state.h): the probe alone.
  if (g_vm_readv.load(std::memory_order_relaxed) && !SeccompFiltered()) {
    char byte;
    iovec local{&byte, 1};
    iovec remote{reinterpret_cast<void*>(addr), 1};
    const long pid = RawSyscall6(SYS_getpid, 0, 0, 0, 0, 0, 0);
    const long r = RawSyscall6(SYS_process_vm_readv, pid, reinterpret_cast<long>(&local), 1,
                               reinterpret_cast<long>(&remote), 1, 0);
    if (r == 1) return true;
    if (r == -EFAULT || r == -ESRCH || r == 0) return false;
    g_vm_readv.store(0, std::memory_order_relaxed);  // EPERM, ENOSYS: a sandbox
  }
  return MaskProbeUsable() && MaskProbeReadable(addr);
}

}  // namespace

void NoteLibunwindCode() {
  // One function of each library: the local-only one and the generic one.
  const char* names[2] = {"_ULx86_64_init_local", "_Ux86_64_init_remote"};
  for (int i = 0; i < 2; i++) {
    void* sym = dlsym(RTLD_DEFAULT, names[i]);
    if (!sym) continue;
    FindSegment f{reinterpret_cast<uintptr_t>(sym)};
    if (!dl_iterate_phdr(FindExecSegment, &f)) continue;
    g_libunwind_code[i].lo.store(f.lo, std::memory_order_relaxed);
    g_libunwind_code[i].hi.store(f.hi, std::memory_order_release);
  }
}

bool CalledFromLibunwind(const void* return_address) {
  const auto a = reinterpret_cast<uintptr_t>(return_address);
  for (const CodeRange& r : g_libunwind_code) {
    const uintptr_t hi = r.hi.load(std::memory_order_acquire);
    if (a < hi && a >= r.lo.load(std::memory_order_relaxed)) return true;
  }
  return false;
}

LibunwindInitScope::LibunwindInitScope() { t_in_init_scope = true; }
LibunwindInitScope::~LibunwindInitScope() { t_in_init_scope = false; }
bool InLibunwindInitScope() { return t_in_init_scope; }

int MakeValidationPipe(int fds[2]) {
  fds[0] = kValidationReadFd;
  fds[1] = kValidationWriteFd;
  return 0;
}

ssize_t ValidationPipeRead() {
  errno = EAGAIN;
  return -1;
}

size_t ReadablePrefix(uintptr_t addr, size_t len) {
  constexpr uintptr_t kPage = 4096;
  if (addr + len < addr) len = static_cast<size_t>(UINTPTR_MAX - addr);
  size_t ok = 0;
  while (ok < len) {
    const uintptr_t p = addr + ok;
    if (!ByteReadable(p)) break;
    const size_t to_page_end = static_cast<size_t>(kPage - (p & (kPage - 1)));
    ok += to_page_end < len - ok ? to_page_end : len - ok;
  }
  return ok;
}

ssize_t ValidationPipeWrite(const void* addr, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  if (n == 0) return 0;
  if (a + n < a) {
    errno = EFAULT;
    return -1;
  }
  constexpr uintptr_t kPage = 4096;
  // One byte per page touched: readability is a page's property.
  for (uintptr_t p = a; p < a + n; p = (p & ~(kPage - 1)) + kPage) {
    if (!ByteReadable(p)) {
      errno = EFAULT;
      return -1;
    }
  }
  return static_cast<ssize_t>(n);
}

}  // namespace flightrec
