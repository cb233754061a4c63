// Allocation profiler (see alloc_profiler.h): init, the countdown-expired
// decision, the sampled path and the free side. Runs on application threads
// from inside the malloc hooks: no locks, no host malloc of its own, no I/O.
#include "preload/alloc/alloc_profiler.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "preload/alloc/alloc_events.h"
#include "preload/alloc/stack_refs.h"
#include "preload/alloc/alloc_real.h"
#include "preload/alloc/alloc_sampler.h"
#include "preload/alloc/alloc_stack_trim.h"
#include "preload/runtime/clock.h"
#include "preload/flush/drop_ledger.h"
#include "preload/runtime/core_events.h"
#include "preload/runtime/features.h"
#include "preload/flush/flush_registry.h"
#include "preload/runtime/log.h"
#include "preload/threads/record_kinds.h"
#include "preload/runtime/runtime_state.h"
#include "preload/threads/thread_registry.h"
#include "preload/stacks/local_stack.h"
#include "preload/stacks/stack_limits.h"

namespace flightrec {
namespace alloc {

SampledAddressSet g_sampled;

namespace {

enum Mode : int { kPreInit = 0, kOff = 1, kOn = 2 };

// g_mean and g_trim are written by AllocProfilerInit before the release
// store of g_mode = kOn, and only read after an acquire load that saw kOn.
std::atomic<int> g_mode{kPreInit};
uint64_t g_mean = 0;
TrimRanges g_trim;
// Our own object's text, when it is the malloc everyone calls (AskedForByUs).
TrimRanges g_self;

// The hooks' code: hook_malloc.cc puts it in a section of its own, so these
// are its bounds (weak: the unit tests link no hooks).
extern "C" const char __start_flightrec_alloc_hooks[] __attribute__((weak, visibility("hidden")));
extern "C" const char __stop_flightrec_alloc_hooks[] __attribute__((weak, visibility("hidden")));

// Whether our own code asked for the block: the frame that called the hook
// (the one after the last frame in the hooks' section) lies in our object.
// That is the static libstdc++ inside libflightrec.so, whose exception
// emergency pool (72 KiB) is allocated by its constructor right after ours:
// the recorder's memory, not the program's, so it is not sampled (it was
// reported as the program's, from ld.so's call_init, and its stack
// symbolized at exit in one process of eight).
bool AskedForByUs(const uint64_t* pcs, int skip) {
  const auto lo = reinterpret_cast<uint64_t>(__start_flightrec_alloc_hooks);
  const auto hi = reinterpret_cast<uint64_t>(__stop_flightrec_alloc_hooks);
  if (lo == 0 || g_self.size() == 0) return false;
  int last = -1;
  for (int i = 0; i < skip; i++)
    if (pcs[i] >= lo && pcs[i] < hi) last = i;
  return last >= 0 && last + 1 < skip && g_self.Contains(pcs[last + 1]);
}

// Frees we could not report (the freeing thread cannot record: a recorder
// thread or one already exiting); the block then looks live. Counted.
std::atomic<uint64_t> g_free_unrecorded{0};

// The weight of samples dropped by a thread without a state (registration
// failed): harvested by ReportAllocCounters with no thread.
DroppedWeight g_dropped_unattached;

// Before init, threads recheck the mode every this many bytes: cheap, and a
// process where init never happens (FLIGHTREC_ENABLE=0) pays almost nothing.
constexpr int64_t kPreInitRecheckBytes = 64 * 1024;

// Frames captured beyond the kept ones, to make room for the trimmed hook
// and operator new frames.
constexpr int kTrimSlack = 8;

// ---- fork safety of stack capture ----------------------------------------
// libunwind takes process-wide mutexes (its memory pool) and the loader's
// lock while it unwinds. A fork while another thread holds one would leave it
// locked forever in the child, and the child's first sampled allocation would
// hang. So fork waits (prepare handler, bounded) until no other thread is
// inside CaptureCurrentStack, and threads arriving meanwhile skip the capture
// (the sample is kept, with an empty stack).
//
// Invariant (Dekker-style, hence seq_cst on both sides): a capture runs only
// if its thread incremented g_unwinders and then saw no fork pending; the
// prepare handler sets g_fork_pending and then waits for g_unwinders to drop.
std::atomic<int> g_unwinders{0};
std::atomic<bool> g_fork_pending{false};
bool g_fork_quiesce_failed = false;  // forking thread only, prepare -> child/parent
bool g_capture_unsafe = false;       // set in a child forked mid-capture: never unwind
__thread int t_in_unwind __attribute__((tls_model("initial-exec"))) = 0;
constexpr uint64_t kForkQuiesceBudgetNs = 100ull * 1000000ull;  // captures take microseconds

int CaptureStack(uint64_t* pcs, int max) {
  if (g_capture_unsafe) return 0;
  g_unwinders.fetch_add(1, std::memory_order_seq_cst);
  int n = 0;
  if (!g_fork_pending.load(std::memory_order_seq_cst)) {
    t_in_unwind = 1;
    n = stacks::CaptureCurrentStack(pcs, max, 0, stacks::MarkTruncated::kYes);
    t_in_unwind = 0;
  }
  g_unwinders.fetch_sub(1, std::memory_order_seq_cst);
  return n;
}

void AtForkPrepare() {
  g_fork_pending.store(true, std::memory_order_seq_cst);
  // A fork from a signal handler that interrupted this thread's own capture
  // must not wait for itself.
  const int self = t_in_unwind;
  const uint64_t deadline = MonotonicNs() + kForkQuiesceBudgetNs;
  g_fork_quiesce_failed = false;
  while (g_unwinders.load(std::memory_order_seq_cst) > self) {
    if (MonotonicNs() > deadline) {
      g_fork_quiesce_failed = true;  // a thread is stuck mid-capture: the child must not unwind
      break;
    }
    sched_yield();
  }
}

void AtForkParent() { g_fork_pending.store(false, std::memory_order_seq_cst); }

void AtForkChild() {
  // Only the forking thread exists here; its own count (if it forked from a
  // handler mid-capture) is dropped when that capture returns.
  g_unwinders.store(t_in_unwind, std::memory_order_seq_cst);
  if (g_fork_quiesce_failed) {
    g_capture_unsafe = true;
    Log(LogLevel::kWarn,
        "forked while a thread was capturing an allocation stack; "
        "allocation samples in this child carry no stacks");
  }
  g_fork_pending.store(false, std::memory_order_seq_cst);
}

// Scope guard for our own sampled/free paths on the app thread: allocations
// made inside (libunwind, thread registration) never sample and never count
// towards the thread's countdown. It also keeps errno: a malloc that
// succeeded must leave errno as it found it, and what we do inside (the
// unwinder's address checks read a pipe and leave EAGAIN, mmap for a new
// ring can fail) sets it.
class InHook {
 public:
  InHook() : t_(t_alloc), saved_countdown_(t_.countdown), saved_in_hook_(t_.in_hook), saved_errno_(errno) {
    t_.in_hook = 1;
  }
  ~InHook() {
    t_.countdown = saved_countdown_;
    t_.in_hook = saved_in_hook_;
    errno = saved_errno_;
  }

 private:
  AllocThreadState& t_;
  int64_t saved_countdown_;
  uint32_t saved_in_hook_;
  int saved_errno_;
};

// Flush source: counters that are not ring drops but still lose data.
void ReportAllocCounters(FlushContext& ctx) {
  static uint64_t full_reported = 0, unrecorded_reported = 0;  // flush thread only
  DropLedger& ledger = TheDropLedger();
  // The sampled-address set grows here, on this thread only, before its
  // tables fill (sampled_address_set.h).
  if (g_sampled.Grow())
    Log(LogLevel::kDebug, "sampled-allocation table: %d tiers, %llu live samples, %llu KiB mapped",
        g_sampled.tier_count(), static_cast<unsigned long long>(g_sampled.live()),
        static_cast<unsigned long long>(g_sampled.mapped_bytes() / 1024));
  ledger.ReportGrowth(ctx, "alloc.table_full", g_sampled.full_count(), &full_reported);
  ledger.ReportGrowth(ctx, "alloc.free_unrecorded", g_free_unrecorded.load(std::memory_order_relaxed),
                      &unrecorded_reported);
  EmitDroppedWeight(ctx, g_dropped_unattached, 0);
}

// A sample whose record did not fit: its estimate (the same one the reports
// give a recorded sample, scripts/flightrec_lib/profiles.alloc_weight) goes to
// the thread's dropped weight, so totals stay right. The sampled path only.
void NoteDroppedSample(size_t size) {
  const double bytes = SampleBytesWeight(size, g_mean), objects = SampleCountWeight(size, g_mean);
  ThreadState* ts = t_state;
  (ts ? ts->alloc_dropped : g_dropped_unattached).Add(bytes, objects);
}

}  // namespace

uint64_t AllocSampleBytes() { return g_mode.load(std::memory_order_acquire) == kOn ? g_mean : 0; }

bool AllocShouldSample(size_t size) {
  AllocThreadState& t = t_alloc;
  // Our own allocations: InHook restores the countdown afterwards.
  if (t.in_hook) return false;
  if (t_thread_flags & kThreadFlagRecorder) {
    // Recorder threads never sample. Their allocations keep taking the slow
    // path, where they go to the recorder arena (hook_malloc.cc).
    t.countdown = kRecorderThreadCountdown;
    return false;
  }
  const int mode = g_mode.load(std::memory_order_acquire);
  if (mode != kOn) {
    t.countdown = mode == kOff ? kNeverSample : kPreInitRecheckBytes;
    return false;
  }
  if (t_thread_flags & kThreadFlagDead) {
    t.countdown = kNeverSample;  // dead threads cannot record
    return false;
  }
  if (t.epoch == 0) {
    // First expiry under this configuration: start this thread's Poisson
    // process here, with this allocation as its first byte.
    t.rng = SeedRandom(static_cast<uint64_t>(syscall(SYS_gettid)), MonotonicNs() ^ reinterpret_cast<uintptr_t>(&t));
    t.epoch = 1;
    t.countdown = DrawGap(&t.rng, g_mean);
    if (!AllocCountdownExpired(&t.countdown, size)) return false;
  }
  t.countdown = DrawGap(&t.rng, g_mean);
  // Nothing can be recorded before the runtime runs or after it stopped;
  // skip the stack capture (the draw above keeps the process unbiased).
  return RuntimeRecording();
}

__attribute__((noinline)) void RecordAllocation(void* ptr, size_t size) {
  InHook guard;
  uint64_t pcs[kMaxAllocFrames + kTrimSlack] = {};  // (next to an unwind, zeroing is free)
  const int n = CaptureStack(pcs, kMaxAllocFrames + kTrimSlack);
  const int skip = g_trim.LeadingTrimmed(pcs, n);
  if (AskedForByUs(pcs, skip)) return;
  int keep = n - skip;
  // Cut at the capture's depth or at ours: the outermost slot says so.
  const bool truncated = (n > 0 && pcs[n - 1] == stacks::kTruncatedStackPc) || keep > kMaxAllocFrames;
  if (keep > kMaxAllocFrames) keep = kMaxAllocFrames;
  if (truncated && keep > 1) pcs[skip + keep - 1] = stacks::kTruncatedStackPc;
  const uint32_t npcs = static_cast<uint32_t>(keep);
  if (!PushAllocSample(t_state, ptr, size, g_mean, pcs + skip, npcs)) {
    NoteDroppedSample(size);  // counted by the writer; not in the trace, so not tracked
    return;
  }
  // A refused insert is counted (alloc.table_full): that block's free will
  // not be seen and it will look live.
  g_sampled.Insert(reinterpret_cast<uintptr_t>(ptr));
}

bool PushAllocSample(ThreadState* ts, void* ptr, size_t size, uint64_t sample_bytes, const uint64_t* pcs,
                     uint32_t npcs) {
  // A stack this thread already pushed in full costs its hash only
  // (stack_refs.h). Only a committed full record marks it known.
  const uint64_t hash = HashStack(pcs, npcs);
  if (ts && PushedStacksOf(ts).Known(hash)) {
    RecordWriter w(ts, kRecAllocSampleRef, sizeof(AllocSampleRefRecord));
    if (!w.ok()) return false;
    auto* r = static_cast<AllocSampleRefRecord*>(w.data());
    r->time_ns = MonotonicNs();
    r->address = reinterpret_cast<uint64_t>(ptr);
    r->size = size;
    r->stack_hash = hash;
    return true;
  }
  {
    RecordWriter w(ts, kRecAllocSample, AllocSampleRecordBytes(npcs));  // ts null: registers the thread
    if (!w.ok()) return false;
    auto* r = static_cast<AllocSampleRecord*>(w.data());
    r->time_ns = MonotonicNs();
    r->address = reinterpret_cast<uint64_t>(ptr);
    r->size = size;
    r->sample_bytes = sample_bytes;
    r->stack_hash = hash;
    r->npcs = npcs;
    r->reserved = 0;
    memcpy(r->pcs, pcs, npcs * sizeof(uint64_t));
    ts = w.thread();
  }
  // After the commit (the writer's destructor): no other push of this
  // thread's can come between, its own signal handlers never sample.
  PushedStacksOf(ts).MarkCommitted(hash);
  return true;
}

bool TakeSampled(void* ptr) { return g_sampled.Remove(reinterpret_cast<uintptr_t>(ptr)); }

void ReinsertSampled(void* ptr) { g_sampled.Insert(reinterpret_cast<uintptr_t>(ptr)); }

void PushFree(void* ptr, uint64_t time_ns) {
  InHook guard;  // RecordWriter may register this thread (mmap, observers)
  RecordWriter w(kRecAllocFree, sizeof(AllocFreeRecord));
  if (!w.ok()) {
    if (t_thread_flags & (kThreadFlagRecorder | kThreadFlagDead))
      g_free_unrecorded.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto* r = static_cast<AllocFreeRecord*>(w.data());
  r->time_ns = time_ns;
  r->address = reinterpret_cast<uint64_t>(ptr);
}

void RecordFreeIfSampled(void* ptr) {
  if (!g_sampled.Remove(reinterpret_cast<uintptr_t>(ptr))) return;
  PushFree(ptr, MonotonicNs());
}

}  // namespace alloc

void AllocProfilerInit(const Config& config) {
  using namespace alloc;
  static bool done = false;
  if (done) return;
  done = true;
  RegisterAllocEvents();
  RegisterFlushSource(ReportAllocCounters);
  ResolveRealAllocator();
  if (config.alloc_sample_bytes == 0) {
    g_mode.store(kOff, std::memory_order_release);  // init said why (lifecycle.cc)
    return;
  }
  if (RealAllocatorEmulated()[0])
    Log(LogLevel::kInfo, "allocations go to %s (emulated there: %s)", RealAllocatorObject(), RealAllocatorEmulated());
  else Log(LogLevel::kInfo, "allocations go to %s", RealAllocatorObject());
  // An allocator behind us that defines C++ operator new itself (tcmalloc,
  // jemalloc and mimalloc all do) serves `new` without calling malloc: those
  // allocations never reach our hooks. Said, not hidden (docs/LIMITS.md).
  Dl_info new_owner, malloc_owner;
  void* global_new = dlsym(RTLD_DEFAULT, "_Znwm");
  if (global_new && dladdr(global_new, &new_owner) &&
      dladdr(reinterpret_cast<void*>(g_real.malloc.load(std::memory_order_relaxed)), &malloc_owner) &&
      new_owner.dli_fbase == malloc_owner.dli_fbase)
    Log(LogLevel::kInfo, "C++ operator new is %s's own and does not call malloc: new and delete are not profiled",
        RealAllocatorObject());
  if (!g_sampled.Init(config.alloc_table_entries))
    Log(LogLevel::kWarn, "cannot map the sampled-allocation table (%llu entries); frees are not tracked",
        static_cast<unsigned long long>(config.alloc_table_entries));
  // Trim our own frames only where our hooks are the malloc everyone calls.
  // Init asked that by calling malloc (MallocReachesAllocHooks) and leaves
  // profiling off when they are not, so here they are, wherever the hooks
  // are built in at all (in unit tests this code is linked into the test
  // binary without them). Asking dlsym instead named a non-PIE program that
  // takes malloc's address (python3) as the malloc, and its allocation
  // stacks then began with RecordAllocation and MallocSlow.
  if (MallocReachesAllocHooks) {
    AddObjectTextRanges(reinterpret_cast<void*>(&AllocProfilerInit), &g_trim);
    AddObjectTextRanges(reinterpret_cast<void*>(&AllocProfilerInit), &g_self);
  }
  AddOperatorNewRanges(&g_trim);
  stacks::InitLocalStackCapture();
  if (pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild) != 0)
    Log(LogLevel::kWarn, "pthread_atfork failed: allocation stacks are not fork-safe");
  g_mean = config.alloc_sample_bytes;
  g_mode.store(kOn, std::memory_order_release);
  // This thread's countdown still holds a pre-init recheck interval: expire
  // it so sampling starts with the very next allocation (threads that ran
  // before init catch up within kPreInitRecheckBytes).
  t_alloc.countdown = 0;
  Log(LogLevel::kInfo, "allocation profiling: mean %llu bytes between samples, %llu live samples tracked",
      static_cast<unsigned long long>(g_mean), static_cast<unsigned long long>(g_sampled.capacity()));
}

}  // namespace flightrec
