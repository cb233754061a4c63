// Local stack capture with libunwind's local-only API and libgcc's unwinder
// (see local_stack.h).
//
// This is the only translation unit that uses UNW_LOCAL_ONLY (the _UL*
// symbols of libunwind.so); stack_unwinder.cc uses the generic _U* API of
// libunwind-x86_64 for remote-style unwinding of copied stacks.
#define UNW_LOCAL_ONLY
#include "preload/stacks/local_stack.h"

#include <dlfcn.h>
#include <libunwind.h>
#include <unwind.h>

#include <atomic>
#include <cstring>

#include "preload/runtime/clock.h"
#include "preload/stacks/stack_limits.h"

namespace flightrec::stacks {

__thread bool t_in_local_capture __attribute__((tls_model("initial-exec"))) = false;

namespace {

std::atomic<bool> g_initialised{false};

// Both unwinders' first entry is the pc in our caller's frame, i.e. inside
// CaptureCurrentStack (their own frames are not returned). This drops it.
constexpr int kSelfFrames = 1;
constexpr int kMaxScratch = 256;

// libgcc's unwinder, looked up by its version in libgcc_s itself: the plain
// name may be libunwind's compatibility copy (an unw_step loop, ~50 us) or a
// host's own, and _Unwind_GetIP must come from the library that made the
// context. Null (libunwind always) when libgcc_s cannot be found. Set once
// at init, get_ip first: a thread that reads backtrace (acquire) sees both.
using GccBacktraceFn = _Unwind_Reason_Code (*)(_Unwind_Trace_Fn, void*);
using GccGetIpFn = _Unwind_Ptr (*)(_Unwind_Context*);
std::atomic<GccBacktraceFn> g_gcc_backtrace{nullptr};
std::atomic<GccGetIpFn> g_gcc_get_ip{nullptr};

GccBacktraceFn GccBacktrace() { return g_gcc_backtrace.load(std::memory_order_acquire); }

// Which unwinder a thread uses (the choice is explained in local_stack.h).
// A thread moves to libunwind for good once it captures more than
// kFastAfterCaptures stacks within one kWindowNs window.
constexpr uint32_t kFastAfterCaptures = 32;
constexpr uint64_t kWindowNs = 1000ull * 1000 * 1000;
#define FR_LOCAL_TLS __thread __attribute__((tls_model("initial-exec")))
FR_LOCAL_TLS bool t_fast_unwinder = false;
FR_LOCAL_TLS uint64_t t_window_start_ns = 0;
FR_LOCAL_TLS uint32_t t_window_captures = 0;
FR_LOCAL_TLS LocalUnwinder t_unwinder_override = LocalUnwinder::kByRate;

// Set by the first __register_frame* call (see local_stack.h).
std::atomic<bool> g_libgcc_frames_registered{false};

bool UseLibunwind() {
  if (!GccBacktrace() || g_libgcc_frames_registered.load(std::memory_order_relaxed)) return true;
  if (t_unwinder_override != LocalUnwinder::kByRate) return t_unwinder_override == LocalUnwinder::kLibunwind;
  if (t_fast_unwinder) return true;
  const uint64_t now = MonotonicNs();
  if (now - t_window_start_ns >= kWindowNs) {
    t_window_start_ns = now;
    t_window_captures = 0;
  }
  if (++t_window_captures > kFastAfterCaptures) t_fast_unwinder = true;
  return t_fast_unwinder;
}

struct GccTrace {
  void** out;
  int n;
  int max;
};

_Unwind_Reason_Code GccFrame(_Unwind_Context* ctx, void* arg) {
  auto* t = static_cast<GccTrace*>(arg);
  if (t->n >= t->max) return _URC_END_OF_STACK;
  const _Unwind_Ptr ip = g_gcc_get_ip.load(std::memory_order_relaxed)(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  t->out[t->n++] = reinterpret_cast<void*>(ip);
  return _URC_NO_REASON;
}

void ResolveLibgccUnwinder() {
  auto bt = reinterpret_cast<GccBacktraceFn>(dlvsym(RTLD_DEFAULT, "_Unwind_Backtrace", "GCC_3.3"));
  auto ip = reinterpret_cast<GccGetIpFn>(dlvsym(RTLD_DEFAULT, "_Unwind_GetIP", "GCC_3.0"));
  Dl_info a{}, b{};
  if (!bt || !ip || !dladdr(reinterpret_cast<void*>(bt), &a) || !dladdr(reinterpret_cast<void*>(ip), &b) ||
      !a.dli_fname || !b.dli_fname || !strstr(a.dli_fname, "libgcc_s") || a.dli_fbase != b.dli_fbase)
    return;
  g_gcc_get_ip.store(ip, std::memory_order_relaxed);
  g_gcc_backtrace.store(bt, std::memory_order_release);
}

// libunwind's process-wide set-up (tdep_init: a mutex taken with signals
// blocked) happens here, not in a hook. With Warm::kThisThread, this thread's
// frame cache too (256 KiB): wanted only where every thread will use
// libunwind's unwinder (libgcc's not found, or a capture before init);
// otherwise a thread's first libunwind unwind makes its cache, as it always
// did on every thread but this one.
enum class Warm : bool { kProcessOnly = false, kThisThread = true };
void InitLibunwind(Warm warm) {
  const bool warm_this_thread = warm == Warm::kThisThread;
  if (g_initialised.exchange(true, std::memory_order_acq_rel)) return;
  // Per-thread caching: no lock on the lookup path (UNW_CACHE_GLOBAL takes a
  // mutex with signals blocked). The fast path (tdep_trace) keeps its frame
  // cache in libunwind's own TLS, allocated with mmap, never malloc.
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  if (warm_this_thread) {
    void* warm[4];
    unw_backtrace(warm, 4);
    t_fast_unwinder = true;  // this thread has paid for its cache already
  } else {
    unw_context_t context;
    unw_cursor_t cursor;
    unw_getcontext(&context);
    unw_init_local(&cursor, &context);  // runs tdep_init, makes no cache
  }
}

}  // namespace

void NoteLibgccFramesRegistered() { g_libgcc_frames_registered.store(true, std::memory_order_seq_cst); }
bool LibgccFramesRegistered() { return g_libgcc_frames_registered.load(std::memory_order_relaxed); }

void SetLocalUnwinderForThisThread(LocalUnwinder u) { t_unwinder_override = u; }
bool LibgccUnwinderAvailable() { return GccBacktrace() != nullptr; }
bool LibunwindChosenForThisThread() { return t_fast_unwinder || !GccBacktrace(); }

void InitLocalStackCapture() {
  static std::atomic<bool> resolved{false};
  if (!resolved.exchange(true, std::memory_order_acq_rel)) {
    ResolveLibgccUnwinder();
    if (GccBacktraceFn bt = GccBacktrace()) {  // its one-time set-up too (lazy binding, its mutex's once)
      void* warm[4];
      GccTrace t{warm, 0, 4};
      bt(GccFrame, &t);
    }
  }
  InitLibunwind(GccBacktrace() == nullptr ? Warm::kThisThread : Warm::kProcessOnly);
}

__attribute__((noinline)) int CaptureCurrentStack(uint64_t* pcs, int max, int skip, MarkTruncated mark) {
  const bool mark_truncated = mark == MarkTruncated::kYes;
  if (max <= 0) return 0;
  // Lazily (a hook before init): libunwind only; no dlvsym from a hook.
  if (!g_initialised.load(std::memory_order_acquire)) InitLibunwind(Warm::kThisThread);
  if (skip < 0) skip = 0;
  const int drop = kSelfFrames + skip;
  void* raw[kMaxScratch];
  // One frame more than asked for tells whether the stack goes on.
  int want = drop + max + (mark_truncated ? 1 : 0);
  if (want > kMaxScratch) want = kMaxScratch;
  // Nested captures (a hook reached from inside libunwind) keep the outer
  // flag: only the outermost capture clears it.
  const bool outer = !t_in_local_capture;
  t_in_local_capture = true;
  int n;
  if (UseLibunwind()) {
    n = unw_backtrace(raw, want);
  } else {
    GccTrace t{raw, 0, want};
    GccBacktrace()(GccFrame, &t);
    n = t.n;
  }
  if (outer) t_in_local_capture = false;
  int out = 0;
  for (int i = drop; i < n && out < max; ++i) {
    const uint64_t ret = reinterpret_cast<uint64_t>(raw[i]);
    if (ret == 0) break;
    // Return address -> inside the call instruction.
    pcs[out++] = ret - 1;
  }
  if (mark_truncated && out == max && n > drop + max && max > 1) pcs[max - 1] = kTruncatedStackPc;
  return out;
}

bool LocalFunctionRange(uint64_t pc, uint64_t* start, uint64_t* end) {
  unw_proc_info_t info;
  if (unw_get_proc_info_by_ip(unw_local_addr_space, static_cast<unw_word_t>(pc), &info, nullptr) != 0) return false;
  if (info.start_ip == 0 || pc < info.start_ip || pc >= info.end_ip) return false;
  *start = info.start_ip;
  *end = info.end_ip;
  return true;
}

}  // namespace flightrec::stacks
