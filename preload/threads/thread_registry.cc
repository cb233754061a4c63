// Thread registry: claims, recycles and retires ThreadStates (see
// thread_registry.h for the state machine). Slots are mmap'd and never
// unmapped, so the flush thread walks the append-only list without locks.
#include "preload/threads/thread_registry.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "preload/runtime/clock.h"
#include "preload/runtime/config.h"
#include "preload/threads/ring_growth.h"
#include "preload/runtime/runtime_state.h"
#include "preload/threads/thread_records.h"

namespace flightrec {

__thread uint32_t t_thread_flags __attribute__((tls_model("initial-exec"))) = 0;
__thread ThreadState* t_state __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

// kClaimed: a thread is initialising the slot; the flush thread skips it.
constexpr int kClaimed = 3;

std::atomic<ThreadState*> g_head{nullptr};
std::atomic<uint64_t> g_unattributed_drops{0};
pthread_key_t g_exit_key;
std::atomic<bool> g_key_ready{false};

constexpr int kMaxObservers = 8;
ThreadObserverFn g_on_start[kMaxObservers];
ThreadObserverFn g_on_exit[kMaxObservers];
std::atomic<int> g_observer_count{0};

pid_t GetTid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

size_t SlotHeaderBytes() { return (sizeof(ThreadState) + 4095) & ~size_t{4095}; }

ThreadState* NewSlot(size_t ring_bytes) {
  const size_t total = SlotHeaderBytes() + ring_bytes;
  void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return nullptr;
  auto* ts = new (mem) ThreadState();
  ts->ring.Init(static_cast<uint8_t*>(mem) + SlotHeaderBytes(), ring_bytes);
  ts->state.store(kClaimed, std::memory_order_relaxed);
  // Publish on the list; the flush thread skips it until it is kActive.
  ThreadState* head = g_head.load(std::memory_order_relaxed);
  do {
    ts->next = head;
  } while (!g_head.compare_exchange_weak(head, ts, std::memory_order_release, std::memory_order_relaxed));
  return ts;
}

ThreadState* ClaimFreeSlot() {
  for (ThreadState* ts = g_head.load(std::memory_order_acquire); ts; ts = ts->next) {
    int expected = static_cast<int>(ThreadSlotState::kFree);
    if (ts->state.load(std::memory_order_relaxed) == expected &&
        ts->state.compare_exchange_strong(expected, kClaimed, std::memory_order_acquire)) {
      return ts;
    }
  }
  return nullptr;
}

void ExitKeyDestructor(void*) {
  ThreadState* ts = t_state;
  if (!ts) return;
  const int n = g_observer_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (g_on_exit[i]) g_on_exit[i](ts);
  {
    RecordWriter w(kRecThreadEnd, sizeof(ThreadEndRecord), IfUnregistered::kSkip);
    if (w.ok()) {
      auto* r = new (w.data()) ThreadEndRecord();
      r->time_ns = MonotonicNs();
      r->tid = ts->tid;
      prctl(PR_GET_NAME, r->name, 0, 0, 0);
    } else {
      prctl(PR_GET_NAME, ts->name, 0, 0, 0);
      ts->end_dropped = true;
    }
  }
  t_thread_flags |= kThreadFlagDead;
  t_state = nullptr;
  ts->state.store(static_cast<int>(ThreadSlotState::kRetired), std::memory_order_release);
}

ThreadState* RegisterCurrentThread(pid_t parent_tid, uint64_t start_routine) {
  t_thread_flags |= kThreadFlagRegistering;
  ThreadState* ts = ClaimFreeSlot();
  // Recycled slots keep their ring; ring_bytes is fixed for the process.
  const size_t ring_bytes = GetConfig().ring_bytes;
  if (!ts) ts = NewSlot(ring_bytes);
  if (!ts) {
    t_thread_flags &= ~kThreadFlagRegistering;
    return nullptr;
  }
  ts->ring.Reset();  // a grown ring was released when the slot was freed (ring_growth.h)
  // Producers' per-thread ranges start empty (producer_slots.h): e.g. none
  // of this thread's stacks reached the consumer yet (its table forgets at
  // the generation below).
  for (const ProducerSlotSpec& s : kProducerSlots)
    if (s.life == SlotLife::kPerThread) memset(ts->producer_slots + s.offset, 0, s.bytes);
  for (int i = 0; i < kRecordKindCount; ++i) {
    ts->dropped[i].store(0, std::memory_order_relaxed);
    ts->dropped_reported[i] = 0;
  }
  ts->tid = GetTid();
  ts->parent_tid = parent_tid;
  ts->start_routine = start_routine;
  memset(ts->name, 0, sizeof(ts->name));
  prctl(PR_GET_NAME, ts->name, 0, 0, 0);
  ts->ring.producer_busy = 0;
  ts->generation++;
  ts->start_emitted = false;
  ts->end_dropped = false;
  ts->state.store(static_cast<int>(ThreadSlotState::kActive), std::memory_order_release);
  t_state = ts;
  if (g_key_ready.load(std::memory_order_acquire)) pthread_setspecific(g_exit_key, ts);

  {
    RecordWriter w(kRecThreadStart, sizeof(ThreadStartRecord), IfUnregistered::kSkip);
    if (w.ok()) {
      auto* r = new (w.data()) ThreadStartRecord();
      r->time_ns = MonotonicNs();
      r->tid = ts->tid;
      r->parent_tid = parent_tid;
      r->start_routine = start_routine;
      memcpy(r->name, ts->name, sizeof(r->name));
    }
  }
  t_thread_flags &= ~kThreadFlagRegistering;
  const int n = g_observer_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (g_on_start[i]) g_on_start[i](ts);
  return ts;
}

}  // namespace

void InitThreadRegistry() {
  if (!g_key_ready.load(std::memory_order_relaxed)) {
    if (pthread_key_create(&g_exit_key, ExitKeyDestructor) == 0) g_key_ready.store(true, std::memory_order_release);
  }
}

bool RecordingActive() { return RuntimeRecording(); }
uint64_t UnattributedDrops() { return g_unattributed_drops.load(std::memory_order_relaxed); }

ThreadState* CurrentThreadState(IfUnregistered if_unregistered) {
  ThreadState* ts = t_state;
  if (__builtin_expect(ts != nullptr, 1)) return ts;
  if (if_unregistered == IfUnregistered::kSkip || t_thread_flags != 0 || !RuntimeRecording()) return nullptr;
  return RegisterCurrentThread(0, 0);
}

void MarkRecorderThread() { t_thread_flags |= kThreadFlagRecorder; }

void RegisterThreadFromHook(pid_t parent_tid, uint64_t start_routine) {
  if (t_state || t_thread_flags != 0 || !RuntimeRecording()) return;
  RegisterCurrentThread(parent_tid, start_routine);
}

ThreadState* RegistryHead() { return g_head.load(std::memory_order_acquire); }

void ResetRegistryAfterFork() {
  for (ThreadState* ts = g_head.load(std::memory_order_relaxed); ts; ts = ts->next) {
    ReleaseRingGrowth(ts);  // the child's copy of a grown ring: unmapped, back to the base
    ts->ring.producer_busy = 0;
    ts->state.store(static_cast<int>(ThreadSlotState::kFree), std::memory_order_relaxed);
  }
  t_state = nullptr;
  t_thread_flags &= ~(kThreadFlagDead | kThreadFlagRegistering);
}

void AddThreadObserver(ThreadObserverFn on_start, ThreadObserverFn on_exit) {
  const int i = g_observer_count.load(std::memory_order_relaxed);
  if (i >= kMaxObservers) return;
  g_on_start[i] = on_start;
  g_on_exit[i] = on_exit;
  g_observer_count.store(i + 1, std::memory_order_release);
}

ThreadState* RecordWriter::RegisterForRecord(IfUnregistered if_unregistered) {
  const int saved_errno = errno;
  ThreadState* ts = CurrentThreadState(if_unregistered);
  if (!ts && if_unregistered == IfUnregistered::kRegister && RuntimeRecording() && t_thread_flags == 0)
    g_unattributed_drops.fetch_add(1, std::memory_order_relaxed);
  errno = saved_errno;
  return ts;
}

void* RecordWriter::ReserveWhenFull(ThreadState* ts, uint16_t kind, uint32_t payload) {
  if (!GrowRingNow(ts)) return nullptr;
  return ts->ring.Reserve(kind, payload);
}

void RecordWriter::CountDrop(ThreadState* ts, uint16_t kind) {
  ts->dropped[kind].fetch_add(1, std::memory_order_relaxed);
}

bool InVforkChild() {
  const ThreadState* ts = t_state;
  return ts && ts->tid != GetTid();
}

}  // namespace flightrec
