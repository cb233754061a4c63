// Thread registry: one ThreadState per application thread, holding that
// thread's ring and drop counters, reached through initial-exec TLS.
//
// Ownership: ThreadStates live in mmap'd memory owned by the registry and are
// never unmapped, only recycled, so the flush thread can walk the list
// without locks. States: kFree -> kActive (claimed by a thread) -> kRetired
// (thread exited; ring may hold records) -> kFree (flush thread drained it).
//
// Signal safety: CurrentThreadState() is async-signal-safe once the thread is
// registered; registration itself (first record of a thread not created
// through our pthread_create hook) uses mmap and is never done from a signal
// handler (handlers pass IfUnregistered::kSkip).
#pragma once
#include <atomic>
#include <csignal>
#include <cstdint>
#include <new>
#include <sys/types.h>
#include <type_traits>

#include "preload/flush/flush_wakeup.h"
#include "preload/threads/dropped_weight.h"
#include "preload/threads/producer_slots.h"
#include "preload/threads/record_kinds.h"
#include "preload/threads/ring.h"

namespace flightrec {

enum class ThreadSlotState : int { kFree = 0, kActive = 1, kRetired = 2 };

struct ThreadState {
  Ring ring;
  std::atomic<int> state{0};  // ThreadSlotState
  pid_t tid = 0;
  pid_t parent_tid = 0;
  uint64_t start_routine = 0;  // address, 0 if unknown
  char name[16] = {};
  // Drops per record kind. Written only by the owning thread (relaxed), read by
  // the flush thread, which reports deltas.
  std::atomic<uint64_t> dropped[kRecordKindCount];
  uint64_t dropped_reported[kRecordKindCount];  // flush-thread private
  uint64_t generation = 0;                      // bumped on each reuse of the slot
  ThreadState* next = nullptr;                  // registry list (append-only)
  bool start_emitted = false;                   // flush-thread private
  // Set by the exiting thread before it publishes kRetired when its own
  // thread.end record did not fit the ring; the flush thread then writes the
  // end from the slot (core_events.cc).
  bool end_dropped = false;
  // crash_handler.cc: this slot's alternate signal stack, mmap'd on first use
  // and kept when the slot is reused (never unmapped, like the slot).
  void* crash_altstack = nullptr;
  // dropped_weight.h: the weight of sampled allocations whose records were dropped.
  DroppedWeight alloc_dropped;
  // dropped_weight.h: the blocks (off-CPU samples) whose records were dropped.
  DroppedTime offcpu_dropped;
  // ring_growth.h, flush-thread private: bytes drained since the window began.
  uint64_t ring_window_start_ns = 0;
  uint64_t ring_window_bytes = 0;
  // ring_growth.h, flush-thread private: the base ring's pages were given
  // back after the thread moved to its grown ring.
  bool ring_base_released = false;
  // producer_slots.h: the producers' own per-thread state (socket gaps,
  // allocation stack references), reached through ProducerSlot below.
  alignas(kProducerSlotAlign) unsigned char producer_slots[kProducerSlotBytes];
};

// A producer's range of the thread's slot (producer_slots.h), as its type.
// A constant offset from ts: async-signal-safe, no call.
template <typename T, const ProducerSlotSpec& kSpec>
inline T& ProducerSlot(ThreadState* ts) {
  static_assert(sizeof(T) <= kSpec.bytes, "the producer's type outgrew its range in producer_slots.h");
  static_assert(alignof(T) <= kProducerSlotAlign && kSpec.offset % alignof(T) == 0, "misaligned producer slot");
  static_assert(std::is_trivially_destructible_v<T>, "producer slots are never destroyed");
  return *std::launder(reinterpret_cast<T*>(ts->producer_slots + kSpec.offset));
}

// Per-thread flags in initial-exec TLS, readable from hot paths without a call.
inline constexpr uint32_t kThreadFlagRecorder = 1;     // one of flightrec's own threads
inline constexpr uint32_t kThreadFlagDead = 2;         // exiting: never register again
inline constexpr uint32_t kThreadFlagRegistering = 4;  // inside registration (mmap, setspecific)
extern __thread uint32_t t_thread_flags __attribute__((tls_model("initial-exec")));

// Global switch: true from init until shutdown (and false when disabled).
bool RecordingActive();

// Drops that could not be charged to a thread (registration failed).
uint64_t UnattributedDrops();

// What to do for a thread that has no state yet: register it (mmap, not
// from a signal handler), or go without (a handler, an exiting thread).
enum class IfUnregistered : bool { kSkip = false, kRegister = true };

// The calling thread's state. Registers the thread on first use when
// asked (IfUnregistered::kRegister). Returns nullptr when recording is off, the
// thread is a recorder thread, or the thread is exiting.
ThreadState* CurrentThreadState(IfUnregistered if_unregistered = IfUnregistered::kRegister);

// True in a vfork child: it runs in the parent's memory (every table of
// ours included) until it execs or exits, with its own pid, fd table and
// signal dispositions. Its thread state is the parent thread's, whose tid is
// not the child's (a fork child has re-registered before fork returns).
// One gettid system call; for rare paths (signal dispositions).
bool InVforkChild();

// Marks the calling thread as one of flightrec's own: never recorded.
void MarkRecorderThread();
inline bool IsRecorderThread() { return (t_thread_flags & kThreadFlagRecorder) != 0; }

// Called by the pthread_create hook on the new thread before the start routine.
void RegisterThreadFromHook(pid_t parent_tid, uint64_t start_routine);

// Head of the registry list, for the flush thread.
ThreadState* RegistryHead();

// In a forked child: forget every inherited state (their rings belong to the
// parent's threads) and start empty. Async-signal-safe.
void ResetRegistryAfterFork();

// Observers told on the thread itself when it is registered / exits. Used by
// the sampler to arm and disarm per-thread timers. Register at init only.
using ThreadObserverFn = void (*)(ThreadState*);
void AddThreadObserver(ThreadObserverFn on_start, ThreadObserverFn on_exit);

// The calling thread's state once registered (what CurrentThreadState
// returns without registering). Read inline by RecordWriter's fast path.
extern __thread ThreadState* t_state __attribute__((tls_model("initial-exec")));

// RecordWriter: RAII reservation of one record in the calling thread's ring.
//   RecordWriter w(kRecFoo, sizeof(Foo));
//   if (w.ok()) { new (w.data()) Foo{...}; }   // committed by the destructor
// A full ring or a busy ring (signal re-entry) counts a drop for `kind`.
// Inline: for a registered thread the push is a few loads and stores with no
// call into another object's code, which matters to hooks around system
// calls (after the kernel returns, every cache line a hook touches, code or
// data, has to be fetched again). Never changes errno.
class RecordWriter {
 public:
  RecordWriter(uint16_t kind, uint32_t payload_bytes, IfUnregistered if_unregistered = IfUnregistered::kRegister)
      : RecordWriter(t_state, kind, payload_bytes, if_unregistered) {}
  // With the caller's own read of t_state (a hook that reaches TLS more
  // cheaply than through the GOT); null means "not registered yet".
  // always_inline: left to itself GCC outlines this constructor in files
  // with many pushes (hook_socket_io.cc's), which put a call and three more
  // instruction cache lines on every recorded socket call. The rare paths
  // (registration, drops) are calls.
  __attribute__((always_inline)) RecordWriter(ThreadState* ts, uint16_t kind, uint32_t payload_bytes,
                                              IfUnregistered if_unregistered = IfUnregistered::kRegister) {
    if (__builtin_expect(ts == nullptr, 0)) {
      ts = RegisterForRecord(if_unregistered);
      if (!ts) return;
    }
    if (__builtin_expect(ts->ring.producer_busy != 0, 0)) {  // a signal handler interrupted a push here
      CountDrop(ts, kind);
      return;
    }
    ts->ring.producer_busy = 1;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    data_ = ts->ring.Reserve(kind, payload_bytes);
    if (__builtin_expect(!data_, 0)) data_ = ReserveWhenFull(ts, kind, payload_bytes);
    if (__builtin_expect(!data_, 0)) {
      CountDrop(ts, kind);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      ts->ring.producer_busy = 0;
      return;
    }
    ts_ = ts;
  }
  __attribute__((always_inline)) ~RecordWriter() {
    if (!ts_) return;
    ts_->ring.Commit();
    std::atomic_signal_fence(std::memory_order_seq_cst);
    ts_->ring.producer_busy = 0;
    if (__builtin_expect(ts_->ring.TakeNudge(), 0)) NudgeFlushThread();
  }
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;
  bool ok() const { return data_ != nullptr; }
  void* data() const { return data_; }
  ThreadState* thread() const { return ts_; }

 private:
  // Slow path for a thread without a state: registers it (when allowed and
  // recording), else counts the record as an unattributed drop. errno is kept.
  static ThreadState* RegisterForRecord(IfUnregistered if_unregistered);
  // A record that found no room: moves the ring to a bigger buffer at once
  // if one is offered or a spare is ready (ring_growth.h), and tries again.
  // Lock-free, no system call; null if there is still no room.
  __attribute__((noinline, cold)) static void* ReserveWhenFull(ThreadState* ts, uint16_t kind, uint32_t payload);
  // A record of `kind` that found no room (or a busy ring): counted, out of line.
  __attribute__((noinline, cold)) static void CountDrop(ThreadState* ts, uint16_t kind);

  ThreadState* ts_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace flightrec
