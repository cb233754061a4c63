// Stack unwinder: unwinds a *copied* user stack (from a perf sample or the
// SIGPROF handler) with libunwind's remote API, on the flush thread.
//
// Memory model: addresses inside [stack_addr, stack_addr + copy_len) read the
// copy; every other address (code, .eh_frame, deeper stack) is read from our
// own process with SafeReadSelf, so a bad address fails the read instead of
// faulting. Registers come from a RegisterSet captured with the copy.
//
// Threading: one libunwind address space (with its unwind-info cache) per
// role, made by PrepareUnwinders before any unwinding, so unwinding never
// mallocs. Two threads must not unwind in the same role at once. Intended
// for recorder threads only; never call it from hooks or signal handlers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ucontext.h>

namespace flightrec::stacks {

// Indexed by libunwind's x86_64 numbering: UNW_X86_64_RAX (0), RDX, RCX, RBX,
// RSI, RDI, RBP, RSP (7), R8..R15 (8..15), RIP (16).
struct RegisterSet {
  enum : int {
    kRax = 0,
    kRdx,
    kRcx,
    kRbx,
    kRsi,
    kRdi,
    kRbp,
    kRsp,
    kR8,
    kR9,
    kR10,
    kR11,
    kR12,
    kR13,
    kR14,
    kR15,
    kRip,
    kCount
  };
  uint64_t r[kCount];
  uint64_t ip() const { return r[kRip]; }
  uint64_t sp() const { return r[kRsp]; }
};

// The PERF_SAMPLE_REGS_USER mask (bits from asm/perf_regs.h) that covers every
// RegisterSet slot: AX BX CX DX SI DI BP SP IP and R8..R15.
uint64_t PerfRegsUserMask();

// Converts perf's sample_regs_user values (one u64 per set bit of `mask`, in
// ascending bit order, as the kernel writes them) into a RegisterSet.
// Registers absent from the mask are zero. Returns false if `count` values
// are fewer than the mask needs.
bool RegisterSetFromPerf(uint64_t mask, const uint64_t* values, size_t count, RegisterSet* out);

// Async-signal-safe: used in the SIGPROF handler.
void RegisterSetFromUcontext(const ucontext_t* uc, RegisterSet* out);

// Who unwinds. Each role's unwinding is done by one thread at a time: the
// sampler thread or the thread stopping it; the flush thread or the thread
// stopping it.
enum class UnwindRole : int { kSampler = 0, kFlush = 1 };
constexpr int kUnwindRoleCount = 2;

// Creates the address spaces (host calloc). Call where the host's malloc is
// safe and before any recorder thread unwinds: the constructor, and a fork
// child's flush thread (after DeferUnwindersAfterFork) when the child goes
// live or seals. Creates only the missing ones.
void PrepareUnwinders();

// In a fork child's handler, on the program's thread: no allocation. The
// sampler's inherited address space is let go (leaked: a parent sampler
// thread may have been inside it, holding its cache lock, at the fork); the
// child's flush thread makes a new one with PrepareUnwinders when the child
// goes live or seals, before any sample of the child is unwound. A child that
// execs at once never pays for it. The crash path's address space is kept:
// only a crash report unwinds with it, and a parent that is crashing does
// not fork.
void DeferUnwindersAfterFork();

// Unwinds and writes up to `max` pcs, leaf first: pcs[0] is regs.ip itself;
// callers are return address - 1 (inside the call instruction), except the
// frame interrupted by a signal, whose pc is exact. Returns the count (>= 1
// when regs.ip != 0; 0 only for max <= 0 or ip == 0). Never faults on bad
// input: a garbage copy just ends the walk early. A stack that goes on past
// `max` frames has kTruncatedStackPc (stack_limits.h) as its last entry.
// Without PrepareUnwinders, returns the leaf alone.
int UnwindCopiedStack(UnwindRole role, const RegisterSet& regs, uint64_t stack_addr, const uint8_t* copy,
                      size_t copy_len, uint64_t* pcs, int max);

// For tests: how many times UnwindCopiedStack asked libunwind whether a
// leaf has unwind info. The last 32 leaf functions found with it are known
// per role (no question asked for a pc inside them) until the loaded
// objects change (dlpi_adds/dlpi_subs).
uint64_t LeafProcInfoLookups();

// True while the calling thread is inside UnwindCopiedStack. libunwind's
// cache lock (Debian builds it without per-thread caches) brackets every
// lookup with two rt_sigprocmask syscalls; on recorder threads, which run
// with every signal blocked, preload/crash/hook_signal.cc turns those into no-ops
// while this is set (measured: ~100 us -> ~1.5 us for an 18-frame stack).
extern __thread bool t_in_unwinder __attribute__((tls_model("initial-exec")));

// Reads `len` bytes of our own memory at `addr` without faulting. Returns
// false if any byte is unmapped or unreadable. process_vm_readv on
// ourselves; where a sandbox refuses that (seccomp), a per-thread pipe
// (write(2) fails with EFAULT instead of faulting). Recorder threads only.
bool SafeReadSelf(uint64_t addr, void* out, size_t len);

}  // namespace flightrec::stacks
