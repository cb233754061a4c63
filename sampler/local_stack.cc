// Local stack capture with libunwind's local-only API (see local_stack.h).
//
// This is the only translation unit that uses UNW_LOCAL_ONLY (the _UL*
// symbols of libunwind.so); stack_unwinder.cc uses the generic _U* API of
// libunwind-x86_64 for remote-style unwinding of copied stacks.
#define UNW_LOCAL_ONLY
#include "sampler/local_stack.h"

#include <libunwind.h>

#include <atomic>

#include "sampler/sample_events.h"

namespace flightrec::sampler {

__thread bool t_in_local_capture __attribute__((tls_model("initial-exec"))) = false;

namespace {

std::atomic<bool> g_initialised{false};

// unw_backtrace's own frame is not returned; the first entry is the pc in our
// caller's frame, i.e. inside CaptureCurrentStack. This constant drops it.
constexpr int kSelfFrames = 1;
constexpr int kMaxScratch = 256;

}  // namespace

void InitLocalStackCapture() {
  if (g_initialised.exchange(true, std::memory_order_acq_rel)) return;
  // Per-thread caching: no lock on the lookup path (UNW_CACHE_GLOBAL takes a
  // mutex with signals blocked). The fast path (tdep_trace) keeps its frame
  // cache in libunwind's own TLS, allocated with mmap, never malloc.
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  void* warm[4];
  unw_backtrace(warm, 4);
}

__attribute__((noinline)) int CaptureCurrentStack(uint64_t* pcs, int max, int skip, bool mark_truncated) {
  if (max <= 0) return 0;
  if (!g_initialised.load(std::memory_order_acquire)) InitLocalStackCapture();
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
  const int n = unw_backtrace(raw, want);
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

}  // namespace flightrec::sampler
