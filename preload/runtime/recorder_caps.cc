// The program's capset, mirrored onto the recorder's threads (recorder_caps.h
// says why). The hook side runs on a program thread: raw system calls, no
// allocation, a bounded wait. The apply side runs on our threads.
#include "preload/runtime/recorder_caps.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "preload/crash/raw_syscall.h"
#include "preload/runtime/clock.h"
#include "preload/runtime/log.h"

namespace flightrec {
namespace {

// How long the program's capset waits for our threads to follow. Each
// looks between two pieces of work and is woken for it; one stuck in a
// long piece (an upload) is not waited for past this: the program's later
// group change may then fail on it as before.
constexpr uint64_t kMirrorWaitNs = 500ull * 1000000ull;
constexpr int kSlots = 8;  // flush, sampler, upload, and room

struct Slot {
  std::atomic<pid_t> tid{0};
  std::atomic<uint32_t> applied{0};
  std::atomic<void (*)()> wake{nullptr};
};
Slot g_slots[kSlots];

// The last capset the program made, under a sequence lock: odd while the
// hook writes it. Even values are generations; 0 is "none yet".
std::atomic<uint32_t> g_seq{0};
std::atomic<bool> g_writing{false};  // one publisher at a time
// Relaxed atomics: the sequence lock orders them (and TSan sees no race).
std::atomic<uint32_t> g_version{0};   // 0: no capset published yet
std::atomic<uint32_t> g_data[2 * 3];  // {effective, permitted, inheritable} x 1 or 2
std::atomic<int> g_keepcaps{-1};      // PR_SET_KEEPCAPS's value; -1: not published
// Recorder threads created but not registered yet: the hook waits for them too.
std::atomic<int> g_starting{0};

__thread int t_caps_slot __attribute__((tls_model("initial-exec"))) = -1;

pid_t Tid() { return static_cast<pid_t>(RawSyscall6(SYS_gettid, 0, 0, 0, 0, 0, 0)); }

int Words(uint32_t version) { return version == _LINUX_CAPABILITY_VERSION_1 ? 1 : 2; }

}  // namespace

uint32_t RecorderCapsCreating() {
  g_starting.fetch_add(1, std::memory_order_acq_rel);
  // The new thread starts with its creator's capabilities. A recorder thread
  // creating one (the flush thread starting the sampler's) may not have
  // applied the latest generation yet: the new thread has what the creator
  // applied, not what was published, and must apply the rest itself.
  if (t_caps_slot >= 0) return g_slots[t_caps_slot].applied.load(std::memory_order_acquire);
  return g_seq.load(std::memory_order_acquire) & ~1u;
}

void RecorderCapsCreateFailed() { g_starting.fetch_sub(1, std::memory_order_acq_rel); }

void RecorderCapsRegisterSelf(uint32_t created_at) {
  const pid_t me = Tid();
  for (int i = 0; i < kSlots; i++) {
    pid_t expected = 0;
    if (g_slots[i].tid.compare_exchange_strong(expected, me, std::memory_order_acq_rel)) {
      // A new thread has its creator's capabilities of when it was created:
      // what was published after that, it still has to apply.
      g_slots[i].wake.store(nullptr, std::memory_order_relaxed);
      g_slots[i].applied.store(created_at, std::memory_order_release);
      t_caps_slot = i;
      break;
    }
  }
  g_starting.fetch_sub(1, std::memory_order_acq_rel);
}

void RecorderCapsSetWaker(void (*wake)()) {
  if (t_caps_slot >= 0) g_slots[t_caps_slot].wake.store(wake, std::memory_order_release);
}

void RecorderCapsUnregisterSelf() {
  if (t_caps_slot < 0) return;
  g_slots[t_caps_slot].tid.store(0, std::memory_order_release);
  t_caps_slot = -1;
}

void RecorderCapsApply() {
  if (t_caps_slot < 0) return;
  Slot& slot = g_slots[t_caps_slot];
  for (int tries = 0; tries < 100; tries++) {
    const uint32_t s1 = g_seq.load(std::memory_order_acquire);
    if (s1 == slot.applied.load(std::memory_order_relaxed)) return;
    if (s1 & 1) continue;  // being written: look again
    // Acquire loads: none of them may move after the second look at the
    // sequence below (TSan supports no standalone fence).
    const int keepcaps = g_keepcaps.load(std::memory_order_acquire);
    __user_cap_header_struct header{g_version.load(std::memory_order_acquire), 0};
    __user_cap_data_struct data[2] = {};
    for (int w = 0; header.version && w < Words(header.version); w++) {
      data[w].effective = g_data[3 * w].load(std::memory_order_acquire);
      data[w].permitted = g_data[3 * w + 1].load(std::memory_order_acquire);
      data[w].inheritable = g_data[3 * w + 2].load(std::memory_order_acquire);
    }
    if (g_seq.load(std::memory_order_acquire) != s1) continue;
    // Whatever the kernel says, this generation is done with: a set this
    // thread cannot take (it never had the permitted bits) is not retried.
    // Keep-caps first: a uid switch after it must leave this thread its
    // permitted set, as it leaves the program's.
    if (keepcaps >= 0) RawSyscall6(SYS_prctl, PR_SET_KEEPCAPS, keepcaps, 0, 0, 0, 0);
    if (header.version)
      RawSyscall6(SYS_capset, reinterpret_cast<long>(&header), reinterpret_cast<long>(data), 0, 0, 0, 0);
    slot.applied.store(s1, std::memory_order_release);
    return;
  }
}

namespace {

// Publishes what `write` sets (under the sequence lock) and waits, bounded,
// until every recorder thread has applied it.
template <typename Write>
void PublishAndWait(Write write) {
  bool anyone = g_starting.load(std::memory_order_acquire) > 0;
  for (const Slot& s : g_slots) anyone |= s.tid.load(std::memory_order_acquire) != 0;
  if (!anyone) return;
  // One publisher at a time: a second program thread's call waits its turn (bounded).
  const uint64_t deadline = MonotonicNs() + kMirrorWaitNs;
  while (g_writing.exchange(true, std::memory_order_acquire)) {
    if (MonotonicNs() >= deadline) return;
    SleepNs(100000);
  }
  const uint32_t odd = g_seq.fetch_add(1, std::memory_order_acq_rel) + 1;
  write();
  const uint32_t gen = odd + 1;
  g_seq.store(gen, std::memory_order_release);
  g_writing.store(false, std::memory_order_release);
  // Wake them (again every 10 ms: a thread still starting sets its waker
  // late) and wait until each has applied it (or a later one).
  for (int round = 0;; round++) {
    bool waiting = g_starting.load(std::memory_order_acquire) > 0;
    for (Slot& s : g_slots) {
      if (s.tid.load(std::memory_order_acquire) == 0) continue;
      if (static_cast<int32_t>(s.applied.load(std::memory_order_acquire) - gen) >= 0) continue;
      waiting = true;
      if (round % 50 == 0)
        if (void (*wake)() = s.wake.load(std::memory_order_acquire)) wake();
    }
    if (!waiting) return;
    if (MonotonicNs() >= deadline) {
      Log(LogLevel::kWarn,
          "a recorder thread did not take on the program's capabilities within %llu ms; "
          "a later setgid/setgroups may fail on it",
          static_cast<unsigned long long>(kMirrorWaitNs / 1000000ull));
      return;
    }
    SleepNs(200000);  // raw: not our nanosleep hook
  }
}

}  // namespace

void RecorderCapsAfterCapset(const void* header_p, const void* data_p) {
  const auto* header = static_cast<const __user_cap_header_struct*>(header_p);
  const auto* data = static_cast<const __user_cap_data_struct*>(data_p);
  if (!header || !data || t_caps_slot >= 0) return;  // our own threads' capsets are not mirrored
  const uint32_t v = header->version;
  if (v != _LINUX_CAPABILITY_VERSION_1 && v != _LINUX_CAPABILITY_VERSION_2 && v != _LINUX_CAPABILITY_VERSION_3) return;
  PublishAndWait([&] {
    g_version.store(v, std::memory_order_relaxed);
    for (int w = 0; w < Words(v); w++) {
      g_data[3 * w].store(data[w].effective, std::memory_order_relaxed);
      g_data[3 * w + 1].store(data[w].permitted, std::memory_order_relaxed);
      g_data[3 * w + 2].store(data[w].inheritable, std::memory_order_relaxed);
    }
  });
}

void RecorderCapsAfterKeepCaps(unsigned long keep) {
  if (t_caps_slot >= 0 || keep > 1) return;
  PublishAndWait([&] { g_keepcaps.store(static_cast<int>(keep), std::memory_order_relaxed); });
}

void RecorderCapsResetAfterFork() {
  // The parent's threads are not in the child; the fork's own thread is
  // not one of ours (fork from a recorder thread does not happen).
  for (Slot& s : g_slots) s.tid.store(0, std::memory_order_relaxed);
  g_starting.store(0, std::memory_order_relaxed);
  t_caps_slot = -1;
}

}  // namespace flightrec
