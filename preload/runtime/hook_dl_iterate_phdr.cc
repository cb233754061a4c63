// dl_iterate_phdr interposer: the recorder's threads never hold the dynamic
// loader's list lock across the application's fork().
//
// libunwind finds unwind tables with dl_iterate_phdr (the sampler thread
// unwinding copied stacks, the flush thread naming code without symbols),
// which holds glibc's dl_load_write_lock while it walks the loaded objects.
// glibc 2.36 resets dl_load_lock in a fork child but not that one: a child
// forked while one of our threads was inside hung in its first dlopen() or
// dl_iterate_phdr() (tests/programs/fork_dlopen.c, with the walk widened by
// a test shim: 1 child in ~10 hung). So fork waits (prepare handler, bounded)
// until no recorder thread is inside, and recorder threads arriving meanwhile
// wait for the fork to finish before they walk.
//
// Invariant (Dekker-style, seq_cst on both sides): a recorder thread walks
// only after it counted itself in g_walkers and then saw no fork pending; the
// prepare handler raises g_forks_pending and then waits for g_walkers to drop.
// A walker preempted inside (our threads run at nice +10, and busy host
// threads can keep them off the CPU for a long while) is lifted to the
// forking thread's priority for the wait (LiftRecorderThread), then put back.
// The application's own calls go straight through. The recorder's own
// dlopen calls (libdw at the first symbolization, libcurl for S3) take the
// same lock and go through RecorderDlopen (loader_quiesce.h); the uploader's
// libcurl/OpenSSL initialisation, which takes their global locks, goes
// through RecorderForkFenced.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>

#include <atomic>

#include "preload/crash/raw_syscall.h"
#include "preload/runtime/clock.h"
#include "preload/runtime/loader_quiesce.h"
#include "preload/runtime/recorder_thread.h"
#include "preload/threads/thread_registry.h"

#define FR_HOOK extern "C" __attribute__((visibility("default")))

namespace {

using WalkCallback = int (*)(dl_phdr_info*, size_t, void*);
using WalkFn = int (*)(WalkCallback, void*);

// Plain, read with __atomic builtins: the pass-through path runs inside
// sanitizer start-up, where no instrumented call may be made (std::atomic's
// members are out-of-line calls in the -O1 TSan build).
WalkFn g_real = nullptr;
std::atomic<int> g_walkers{0};
std::atomic<int> g_forks_pending{0};
// Who is walking: the recorder's threads (flush, sampler, uploader) claim a
// slot each for the walk, so that the forking thread can lift them.
constexpr int kWalkerSlots = 8;
std::atomic<pid_t> g_walker_tids[kWalkerSlots];
__thread pid_t t_tid __attribute__((tls_model("initial-exec"))) = 0;

int ClaimWalkerSlot() {
  if (t_tid == 0) t_tid = static_cast<pid_t>(flightrec::RawSyscall6(SYS_gettid, 0, 0, 0, 0, 0, 0));
  for (int i = 0; i < kWalkerSlots; i++) {
    pid_t free_slot = 0;
    if (g_walker_tids[i].compare_exchange_strong(free_slot, t_tid, std::memory_order_acq_rel)) return i;
  }
  return -1;  // more walkers than slots: counted, just not lifted
}

// A walk takes microseconds; a recorder thread (nice +10) preempted inside
// one on a busy host may take longer. Past this, fork goes on (the host
// comes first) and the child is exposed as before.
constexpr uint64_t kForkWaitNs = 500ull * 1000 * 1000;
// How long a recorder thread waits for a fork in progress before it walks
// anyway (a fork that never returns to its parent handler).
constexpr uint64_t kWalkerWaitNs = 1000ull * 1000 * 1000;

__attribute__((no_sanitize("address", "thread"))) WalkFn Real() {
  WalkFn f = __atomic_load_n(&g_real, __ATOMIC_ACQUIRE);
  if (__builtin_expect(f == nullptr, 0)) {
    f = reinterpret_cast<WalkFn>(dlsym(RTLD_NEXT, "dl_iterate_phdr"));
    __atomic_store_n(&g_real, f, __ATOMIC_RELEASE);
  }
  return f;
}

void SleepBriefly() {
  const timespec ts{0, 50 * 1000};
  flightrec::RawSyscall6(SYS_nanosleep, reinterpret_cast<long>(&ts), 0, 0, 0, 0, 0);  // not our hook
}

void ForkPrepare() {
  g_forks_pending.fetch_add(1, std::memory_order_seq_cst);
  if (flightrec::IsRecorderThread()) return;  // never: our threads do not fork
  if (g_walkers.load(std::memory_order_seq_cst) == 0) return;
  pid_t lifted[kWalkerSlots] = {};
  for (int i = 0; i < kWalkerSlots; i++) {
    lifted[i] = g_walker_tids[i].load(std::memory_order_acquire);
    flightrec::LiftRecorderThread(lifted[i]);
  }
  const uint64_t deadline = flightrec::MonotonicNs() + kForkWaitNs;
  while (g_walkers.load(std::memory_order_seq_cst) != 0 && flightrec::MonotonicNs() < deadline) sched_yield();
  // Back to nice +10 (recorder_thread.cc); a real-time lift stays, as it
  // does for the exit path's.
  for (pid_t tid : lifted)
    if (tid > 0) setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 10);
}

void ForkParent() { g_forks_pending.fetch_sub(1, std::memory_order_seq_cst); }

void ForkChild() {
  // Only the forking thread exists here, and it was not walking for us.
  g_walkers.store(0, std::memory_order_relaxed);
  for (auto& tid : g_walker_tids) tid.store(0, std::memory_order_relaxed);
  t_tid = 0;
  g_forks_pending.store(0, std::memory_order_relaxed);
}

// Runs f (a walk, or a dlopen: both take the loader's list lock) on one of
// the recorder's threads, never across the application's fork (after
// start-up: instrumented).
template <typename F>
auto AsLoaderUser(F f) {
  // Named before counted: a fork that sees the count finds whom to lift.
  const int slot = ClaimWalkerSlot();
  uint64_t deadline = 0;
  for (;;) {
    g_walkers.fetch_add(1, std::memory_order_seq_cst);
    if (g_forks_pending.load(std::memory_order_seq_cst) == 0) break;
    g_walkers.fetch_sub(1, std::memory_order_seq_cst);
    const uint64_t now = flightrec::MonotonicNs();
    if (deadline == 0) deadline = now + kWalkerWaitNs;
    if (now >= deadline) {
      g_walkers.fetch_add(1, std::memory_order_seq_cst);
      break;
    }
    SleepBriefly();
  }
  const auto rc = f();
  if (slot >= 0) g_walker_tids[slot].store(0, std::memory_order_release);
  g_walkers.fetch_sub(1, std::memory_order_seq_cst);
  return rc;
}

int RecorderWalk(WalkFn real, WalkCallback callback, void* data) {
  return AsLoaderUser([&] { return real(callback, data); });
}

__attribute__((constructor)) void RegisterForkQuiesce() {
  Real();
  pthread_atfork(ForkPrepare, ForkParent, ForkChild);
}

}  // namespace

namespace flightrec {

void* RecorderDlopen(const char* file, int flags) {
  return AsLoaderUser([&] { return dlopen(file, flags); });
}

void RecorderForkFenced(void (*fn)(void*), void* arg) {
  AsLoaderUser([&] {
    fn(arg);
    return 0;
  });
}

}  // namespace flightrec

// Not instrumented: sanitizer runtimes list their modules with
// dl_iterate_phdr during their own start-up, which reaches this hook before
// they can track anything (TSan crashed on its function-entry hook).
FR_HOOK __attribute__((no_sanitize("address", "thread"))) int dl_iterate_phdr(WalkCallback callback, void* data) {
  const WalkFn real = Real();
  if (__builtin_expect(!(flightrec::t_thread_flags & flightrec::kThreadFlagRecorder), 1)) return real(callback, data);
  return RecorderWalk(real, callback, data);
}
