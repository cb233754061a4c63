// Remote-style libunwind over a copied stack, inside our own process (see
// stack_unwinder.h). Generic libunwind API (_Ux86_64_*, libunwind-x86_64):
// the local-only API cannot take custom accessors.
#include "preload/stacks/stack_unwinder.h"

#include <asm/perf_regs.h>
#include <dlfcn.h>
#include <libunwind.h>
#include <link.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "preload/fds/fd_guard.h"
#include "preload/runtime/seccomp_state.h"
#include "preload/stacks/stack_limits.h"

namespace flightrec::stacks {

__thread bool t_in_unwinder __attribute__((tls_model("initial-exec"))) = false;

namespace {

// perf register number for each RegisterSet slot (libunwind order).
constexpr int kPerfRegOf[RegisterSet::kCount] = {
    PERF_REG_X86_AX,  PERF_REG_X86_DX,  PERF_REG_X86_CX,  PERF_REG_X86_BX,  PERF_REG_X86_SI,  PERF_REG_X86_DI,
    PERF_REG_X86_BP,  PERF_REG_X86_SP,  PERF_REG_X86_R8,  PERF_REG_X86_R9,  PERF_REG_X86_R10, PERF_REG_X86_R11,
    PERF_REG_X86_R12, PERF_REG_X86_R13, PERF_REG_X86_R14, PERF_REG_X86_R15, PERF_REG_X86_IP,
};

// A few cached lines of our own memory, valid for one UnwindCopiedStack call:
// libunwind reads .eh_frame_hdr/.eh_frame word by word, and one
// process_vm_readv per word would dominate the unwind of a new pc.
constexpr size_t kLineBytes = 256;
constexpr int kLines = 16;

struct Line {
  uint64_t base = ~0ull;  // kLineBytes-aligned; ~0 = empty
  uint8_t bytes[kLineBytes];
};

struct UnwindArg {
  const RegisterSet* regs;
  uint64_t stack_lo, stack_hi;
  const uint8_t* copy;
  Line lines[kLines];
  int next_victim;
};

bool ReadWord(UnwindArg* a, uint64_t addr, uint64_t* out) {
  if (addr >= a->stack_lo && addr + 8 <= a->stack_hi && addr + 8 > addr) {
    std::memcpy(out, a->copy + (addr - a->stack_lo), 8);
    return true;
  }
  const uint64_t base = addr & ~(kLineBytes - 1);
  if (addr + 8 <= base + kLineBytes) {  // the word does not straddle two lines
    for (Line& l : a->lines) {
      if (l.base == base) {
        std::memcpy(out, l.bytes + (addr - base), 8);
        return true;
      }
    }
    Line& l = a->lines[a->next_victim];
    if (SafeReadSelf(base, l.bytes, kLineBytes)) {
      a->next_victim = (a->next_victim + 1) % kLines;
      l.base = base;
      std::memcpy(out, l.bytes + (addr - base), 8);
      return true;
    }
    l.base = ~0ull;  // line partly unmapped: fall through to an exact read
  }
  return SafeReadSelf(addr, out, 8);
}

// process_vm_readv on ourselves, until a sandbox refuses it once.
std::atomic<bool> g_vm_readv_ok{true};
// Fallback: write(2) the bytes into a pipe (the kernel reports EFAULT for an
// unreadable source instead of faulting) and read them back. Per thread.
__attribute__((tls_model("initial-exec"))) __thread int t_pipe_rd = -1;
__attribute__((tls_model("initial-exec"))) __thread int t_pipe_wr = -1;

bool PipeRead(uint64_t addr, void* out, size_t len) {
  if (len > 4096) return false;  // one atomic pipe write (PIPE_BUF)
  if (t_pipe_rd < 0) {
    OwnFdChange opening;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
    // Kept through an application's close-every-fd (fd_guard.h): the
    // bytes of arbitrary addresses must never go to the application's fds.
    t_pipe_rd = TakeOwnFd(fds[0]);
    t_pipe_wr = TakeOwnFd(fds[1]);
  }
  // Raw syscalls: the source is arbitrary memory by design, so no write()
  // wrapper may look at it (sanitizer interceptors, our own I/O hooks).
  const ssize_t w = syscall(SYS_write, t_pipe_wr, reinterpret_cast<const void*>(addr), len);
  if (w <= 0) return false;
  const ssize_t r = syscall(SYS_read, t_pipe_rd, out, static_cast<size_t>(w));
  return w == static_cast<ssize_t>(len) && r == w;
}

int AccessMem(unw_addr_space_t, unw_word_t addr, unw_word_t* val, int write, void* arg) {
  if (write) return -UNW_EINVAL;  // we never write to the target
  uint64_t v;
  if (!ReadWord(static_cast<UnwindArg*>(arg), addr, &v)) return -UNW_EINVAL;
  *val = v;
  return 0;
}

int AccessReg(unw_addr_space_t, unw_regnum_t reg, unw_word_t* val, int write, void* arg) {
  if (write) return -UNW_EREADONLYREG;
  if (reg < 0 || reg >= RegisterSet::kCount) return -UNW_EBADREG;
  *val = static_cast<UnwindArg*>(arg)->regs->r[reg];
  return 0;
}

int AccessFpreg(unw_addr_space_t, unw_regnum_t, unw_fpreg_t*, int, void*) { return -UNW_EBADREG; }
int Resume(unw_addr_space_t, unw_cursor_t*, void*) { return -UNW_EINVAL; }
int GetProcName(unw_addr_space_t, unw_word_t, char*, size_t, unw_word_t*, void*) { return -UNW_ENOINFO; }

// A leaf pc with no unwind table entry (Go code has only .debug_frame,
// which Debian's libunwind does not read; JIT code has none) is walked by
// frame pointers, and a leaf that has not pushed one (a frameless Go leaf,
// any function in its prologue) would lose its caller. In that state the
// return address is the word at sp. It is taken only when the bytes before
// it are a direct call (E8 rel32) whose target lies at or below the leaf's
// pc and within kMaxLeafBytes of it: the call that entered this function.
constexpr uint64_t kMaxLeafBytes = 64 * 1024;

// libunwind (x86_64) answers a pc without unwind info with a made-up
// one-byte procedure rather than an error.
bool HasUnwindInfo(unw_cursor_t* cursor, unw_proc_info_t* pi) {
  if (unw_get_proc_info(cursor, pi) < 0) return false;
  return !(pi->unwind_info == nullptr && pi->end_ip - pi->start_ip <= 1);
}

// The functions recent leaf pcs were found in with unwind info, per role.
// unw_get_proc_info has no cache of its own (libunwind's covers unw_step):
// every call walks the loaded objects under the loader's lock and binary
// searches .eh_frame_hdr, read word by word through process_vm_readv. A
// busy redis-server sampled at 499 Hz made ~870 such reads a second on the
// flush thread, for ~140 distinct lines. A sample's leaf is mostly one of a
// few hot functions, so a handful of ranges answers nearly every sample.
// Forgotten whenever the loaded objects change (dlpi_adds/dlpi_subs): code
// loaded where an unloaded library lay must be asked about again.
// Each role's unwinding is exclusive (see g_as), so no lock.
struct KnownLeafFunctions {
  static constexpr int kRanges = 32;
  unsigned long long adds = 0, subs = 0;
  uint64_t lo[kRanges] = {}, hi[kRanges] = {};
  int next = 0;

  // Whether the objects loaded are those the ranges were learnt from; if
  // not, forgets them all.
  void Refresh() {
    struct Counts {
      unsigned long long adds, subs;
    } now{0, 0};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t size, void* arg) {
          auto* c = static_cast<Counts*>(arg);
          if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
            c->adds = info->dlpi_adds;
            c->subs = info->dlpi_subs;
          }
          return 1;  // the counts are the same in every object's answer
        },
        &now);
    if (now.adds == adds && now.subs == subs && now.adds != 0) return;
    adds = now.adds;
    subs = now.subs;
    for (int i = 0; i < kRanges; i++) lo[i] = hi[i] = 0;
  }
  bool Covers(uint64_t pc) const {
    for (int i = 0; i < kRanges; i++)
      if (pc - lo[i] < hi[i] - lo[i]) return true;
    return false;
  }
  void Learn(uint64_t start, uint64_t end) {
    if (end <= start || adds == 0) return;  // counts unknown: nothing to key them on
    lo[next] = start;
    hi[next] = end;
    next = (next + 1) % kRanges;
  }
};
KnownLeafFunctions g_known_leaves[kUnwindRoleCount];
std::atomic<uint64_t> g_leaf_lookups{0};  // LeafProcInfoLookups (tests)

bool LeafHasUnwindInfo(UnwindRole role, uint64_t pc, unw_cursor_t* cursor) {
  KnownLeafFunctions& known = g_known_leaves[static_cast<int>(role)];
  known.Refresh();
  if (known.Covers(pc)) return true;
  g_leaf_lookups.fetch_add(1, std::memory_order_relaxed);
  unw_proc_info_t info;
  if (!HasUnwindInfo(cursor, &info)) return false;
  known.Learn(info.start_ip, info.end_ip);
  return true;
}

bool ReturnAddressAtSp(UnwindArg* a, uint64_t leaf_pc, uint64_t* ra_out) {
  uint64_t ra = 0, before = 0;
  if (!ReadWord(a, a->regs->sp(), &ra) || ra < 8 || !ReadWord(a, ra - 8, &before)) return false;
  uint8_t code[8];
  std::memcpy(code, &before, 8);  // the 8 bytes ending at ra: code[3] is the call opcode
  if (code[3] != 0xE8) return false;
  int32_t rel = 0;
  std::memcpy(&rel, code + 4, 4);
  const uint64_t target = ra + static_cast<int64_t>(rel);
  if (target > leaf_pc || leaf_pc - target >= kMaxLeafBytes) return false;
  *ra_out = ra;
  return true;
}

// One address space per role, made ahead of use (PrepareUnwinders), never
// on the unwinding path. Why ahead: creation mallocs (26 KB through the host's
// calloc), and a recorder thread inside the host's malloc when the
// application forks can leave an allocator lock held in the child; an
// allocator without fork handlers (GCC 12's ASan) then hung the child's exit
// (test_fork_without_exec, 1 run in ~70 under load). Why one per role, not
// one shared: Debian builds libunwind without per-thread caches, so each
// address space's unwind cache sits behind its own lock, and the sampler and
// the flush thread must not contend for it. Within a role, unwinding is
// exclusive: the role's thread and whoever stops it hand their state over
// (sampler_thread.cc, flush_thread.cc), so one address space is enough.
std::atomic<unw_addr_space_t> g_as[kUnwindRoleCount];

// libunwind-x86_64's own unw_get_accessors. libunwind.so.8 (the local-only
// build, which in-place capture uses) exports a function of the same name,
// and where it comes first in the global scope (a program, or a preload ahead
// of ours, that links it: gperftools' libtcmalloc does) the plain call binds
// to that copy. It sets up its own local address space, not this library's:
// the accessors read back null and the first unwind called address 0
// (LD_PRELOAD="libtcmalloc.so.4 libflightrec.so" died of SIGSEGV). Looked up
// in the library itself, through its handle. Null if it is not loaded.
using GetAccessorsFn = unw_accessors_t* (*)(unw_addr_space_t);
GetAccessorsFn RemoteGetAccessors() {
  static GetAccessorsFn fn = [] {
    void* lib = dlopen("libunwind-x86_64.so.8", RTLD_NOW | RTLD_NOLOAD);
    return lib ? reinterpret_cast<GetAccessorsFn>(dlsym(lib, "_Ux86_64_get_accessors")) : nullptr;
  }();
  return fn;
}

unw_addr_space_t CreateAddressSpace() {
  const GetAccessorsFn get_accessors = RemoteGetAccessors();
  if (!get_accessors) return nullptr;
  // libunwind sets its local address space up on first use and later callers
  // test a plain flag outside its lock, so TSan found the flush thread's read
  // of the accessors unordered against the sampler thread's setup. Make that
  // first use once, under pthread_once: every thread then sees it finished.
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, [] { RemoteGetAccessors()(unw_local_addr_space); });
  // find_proc_info and friends stay the local ones: they locate unwind tables
  // through dl_iterate_phdr of our own process, which is the process the
  // copied stack came from. Only memory and register access are redirected.
  unw_accessors_t acc = *get_accessors(unw_local_addr_space);
  acc.access_mem = AccessMem;
  acc.access_reg = AccessReg;
  acc.access_fpreg = AccessFpreg;
  acc.resume = Resume;
  acc.get_proc_name = GetProcName;
  unw_addr_space_t as = unw_create_addr_space(&acc, 0);
  if (!as) return nullptr;
  // Per-thread caching where libunwind has it (no lock); Debian's falls back
  // to the address space's own cache and lock. UNW_CACHE_GLOBAL takes a mutex
  // with every signal blocked on each lookup, two rt_sigprocmask syscalls per
  // frame, which measured ~5 us per frame here against well under 1 us without.
  unw_set_caching_policy(as, UNW_CACHE_PER_THREAD);
  unw_set_cache_size(as, 4096, 0);
  return as;
}

}  // namespace

uint64_t PerfRegsUserMask() {
  uint64_t mask = 0;
  for (int reg : kPerfRegOf) mask |= 1ull << reg;
  return mask;
}

bool RegisterSetFromPerf(uint64_t mask, const uint64_t* values, size_t count, RegisterSet* out) {
  std::memset(out, 0, sizeof(*out));
  // values[k] belongs to the k-th set bit of mask.
  uint64_t by_perf[64] = {};
  size_t k = 0;
  for (int bit = 0; bit < 64; ++bit) {
    if (!(mask & (1ull << bit))) continue;
    if (k >= count) return false;
    by_perf[bit] = values[k++];
  }
  for (int i = 0; i < RegisterSet::kCount; ++i) out->r[i] = by_perf[kPerfRegOf[i]];
  return true;
}

void RegisterSetFromUcontext(const ucontext_t* uc, RegisterSet* out) {
  const greg_t* g = uc->uc_mcontext.gregs;
  out->r[RegisterSet::kRax] = static_cast<uint64_t>(g[REG_RAX]);
  out->r[RegisterSet::kRdx] = static_cast<uint64_t>(g[REG_RDX]);
  out->r[RegisterSet::kRcx] = static_cast<uint64_t>(g[REG_RCX]);
  out->r[RegisterSet::kRbx] = static_cast<uint64_t>(g[REG_RBX]);
  out->r[RegisterSet::kRsi] = static_cast<uint64_t>(g[REG_RSI]);
  out->r[RegisterSet::kRdi] = static_cast<uint64_t>(g[REG_RDI]);
  out->r[RegisterSet::kRbp] = static_cast<uint64_t>(g[REG_RBP]);
  out->r[RegisterSet::kRsp] = static_cast<uint64_t>(g[REG_RSP]);
  out->r[RegisterSet::kR8] = static_cast<uint64_t>(g[REG_R8]);
  out->r[RegisterSet::kR9] = static_cast<uint64_t>(g[REG_R9]);
  out->r[RegisterSet::kR10] = static_cast<uint64_t>(g[REG_R10]);
  out->r[RegisterSet::kR11] = static_cast<uint64_t>(g[REG_R11]);
  out->r[RegisterSet::kR12] = static_cast<uint64_t>(g[REG_R12]);
  out->r[RegisterSet::kR13] = static_cast<uint64_t>(g[REG_R13]);
  out->r[RegisterSet::kR14] = static_cast<uint64_t>(g[REG_R14]);
  out->r[RegisterSet::kR15] = static_cast<uint64_t>(g[REG_R15]);
  out->r[RegisterSet::kRip] = static_cast<uint64_t>(g[REG_RIP]);
}

bool SafeReadSelf(uint64_t addr, void* out, size_t len) {
  if (len == 0) return true;
  if (addr + len < addr) return false;
  // Under a seccomp filter process_vm_readv may kill rather than fail
  // (preload/runtime/seccomp_state.h): the pipe only.
  if (g_vm_readv_ok.load(std::memory_order_relaxed) && !SeccompFiltered()) {
    iovec local{out, len};
    iovec remote{reinterpret_cast<void*>(addr), len};
    const long n =
        syscall(SYS_process_vm_readv, static_cast<long>(syscall(SYS_getpid)), &local, 1ul, &remote, 1ul, 0ul);
    if (n == static_cast<long>(len)) return true;
    if (n >= 0 || errno == EFAULT || errno == ESRCH) return false;
    // Refused (seccomp, EPERM/ENOSYS): use the pipe from now on.
    g_vm_readv_ok.store(false, std::memory_order_relaxed);
  }
  return PipeRead(addr, out, len);
}

void PrepareUnwinders() {
  for (auto& slot : g_as) {
    if (slot.load(std::memory_order_acquire)) continue;
    slot.store(CreateAddressSpace(), std::memory_order_release);
  }
}

void DeferUnwindersAfterFork() {
  // Leaked, not destroyed: its memory is small and was the parent's anyway.
  g_as[static_cast<int>(UnwindRole::kSampler)].store(nullptr, std::memory_order_release);
}

uint64_t LeafProcInfoLookups() { return g_leaf_lookups.load(std::memory_order_relaxed); }

int UnwindCopiedStack(UnwindRole role, const RegisterSet& regs, uint64_t stack_addr, const uint8_t* copy,
                      size_t copy_len, uint64_t* pcs, int max) {
  if (max <= 0 || regs.ip() == 0) return 0;
  pcs[0] = regs.ip();
  int n = 1;
  unw_addr_space_t as = g_as[static_cast<int>(role)].load(std::memory_order_acquire);
  if (!as) return n;  // not prepared (or creation failed): the leaf frame alone

  // Large (16 x 256 B lines) but recorder threads have ordinary 8 MiB stacks.
  UnwindArg arg;
  arg.regs = &regs;
  arg.copy = copy;
  arg.stack_lo = stack_addr;
  arg.stack_hi = (copy && stack_addr + copy_len >= stack_addr) ? stack_addr + copy_len : stack_addr;
  arg.next_victim = 0;
  for (Line& l : arg.lines) l.base = ~0ull;

  // Set for the whole walk, cleared on every exit path (see the header).
  struct UnwinderScope {
    UnwinderScope() { t_in_unwinder = true; }
    ~UnwinderScope() { t_in_unwinder = false; }
  } scope;
  unw_cursor_t cursor;
  if (unw_init_remote(&cursor, as, &arg) < 0) return n;
  uint64_t prev_sp = regs.sp();
  uint64_t leaf_ra = 0;
  RegisterSet caller;
  if (max > 1 && !LeafHasUnwindInfo(role, regs.ip(), &cursor) && ReturnAddressAtSp(&arg, regs.ip(), &leaf_ra)) {
    // Start the walk at the caller: its sp is just above the return
    // address, and every other register is still its own.
    caller = regs;
    caller.r[RegisterSet::kRip] = leaf_ra;
    caller.r[RegisterSet::kRsp] = regs.sp() + 8;
    arg.regs = &caller;
    if (unw_init_remote(&cursor, as, &arg) < 0) return n;
    pcs[n++] = leaf_ra - 1;
    prev_sp = caller.sp();
  }
  bool prev_signal = false;
  while (n < max) {
    // A signal frame's caller was interrupted, not calling: its pc is exact.
    prev_signal = unw_is_signal_frame(&cursor) > 0;
    if (unw_step(&cursor) <= 0) break;
    unw_word_t ip = 0, sp = 0;
    if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
    if (unw_get_reg(&cursor, UNW_REG_SP, &sp) < 0) break;
    // The stack grows down, so callers sit at higher addresses. A walk that
    // does not climb is looping over garbage (signal frames on an alternate
    // stack are the one legitimate exception).
    if (sp <= prev_sp && !prev_signal) break;
    prev_sp = sp;
    pcs[n++] = prev_signal ? ip : ip - 1;
  }
  // Cut at max while the stack goes on: the outermost slot says so.
  if (n == max && max > 1 && unw_step(&cursor) > 0) pcs[max - 1] = kTruncatedStackPc;
  return n;
}

}  // namespace flightrec::stacks
