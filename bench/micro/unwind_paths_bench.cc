// unwind_paths_bench: what one in-process unwind of the calling thread costs
// by each way there is to do it, 20 frames deep: libunwind's unw_backtrace
// (its fast path: a per-thread cache of each return address's frame rule,
// 256 KiB per thread, written in full on a thread's first unwind), libunwind's
// step-by-step unw_step loop (no such cache), and libgcc's
// _Unwind_Backtrace. Why allocation samples use the first despite its memory
// (docs/LIMITS.md, "Memory per thread that takes allocation samples").
//   unwind_paths_bench [ITERATIONS]
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <time.h>
#include <unwind.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

namespace {

constexpr int kMaxFrames = 64;
constexpr int kDepth = 14;  // plus main, libc's start and the leaf: ~20 frames

enum Way { kUnwBacktrace, kUnwStep, kLibgcc };
Way g_way = kUnwBacktrace;

double NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

struct Collect {
  void** pcs;
  int n;
};

_Unwind_Reason_Code OneFrame(_Unwind_Context* ctx, void* arg) {
  auto* c = static_cast<Collect*>(arg);
  if (c->n >= kMaxFrames) return _URC_END_OF_STACK;
  c->pcs[c->n++] = reinterpret_cast<void*>(_Unwind_GetIP(ctx));
  return _URC_NO_REASON;
}

__attribute__((noinline)) int Leaf() {
  void* pcs[kMaxFrames];
  switch (g_way) {
    case kUnwBacktrace: return unw_backtrace(pcs, kMaxFrames);
    case kUnwStep: {
      unw_context_t uc;
      unw_cursor_t cursor;
      unw_getcontext(&uc);
      unw_init_local(&cursor, &uc);
      int n = 0;
      while (n < kMaxFrames && unw_step(&cursor) > 0) {
        unw_word_t ip;
        unw_get_reg(&cursor, UNW_REG_IP, &ip);
        pcs[n++] = reinterpret_cast<void*>(ip);
      }
      return n;
    }
    case kLibgcc: {
      Collect c{pcs, 0};
      _Unwind_Backtrace(OneFrame, &c);
      return c.n;
    }
  }
  return 0;
}

// Not a tail call, so every level is a frame.
__attribute__((noinline)) int Descend(int depth) {
  if (depth == 0) return Leaf();
  const int n = Descend(depth - 1);
  asm volatile("" : : "r"(n));
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? atoi(argv[1]) : 5000;
  // As flightrec sets it (preload/stacks/local_stack.cc).
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  const char* names[] = {"libunwind unw_backtrace (per-thread frame cache)", "libunwind unw_step loop",
                         "libgcc _Unwind_Backtrace"};
  for (Way way : {kUnwBacktrace, kUnwStep, kLibgcc}) {
    g_way = way;
    const int frames = Descend(kDepth);  // warm up: caches, lazy binding
    const double t0 = NowNs();
    for (int i = 0; i < iterations; ++i) Descend(kDepth);
    const double per = (NowNs() - t0) / iterations;
    printf("  %-50s %3d frames: %9.0f ns per unwind\n", names[way], frames, per);
  }
  return 0;
}
