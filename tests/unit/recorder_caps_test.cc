// The program's PR_SET_KEEPCAPS and capset mirrored onto recorder threads
// (preload/runtime/recorder_caps.h): a thread registered as ours takes them
// on in its loop, and the publishing call returns only once it has. The
// setpriv programs that aborted without this are in
// tests/integration/test_host_safety_caps.py.
#include <doctest/doctest.h>

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "preload/runtime/recorder_caps.h"

using namespace flightrec;

namespace {

// A stand-in recorder thread: registers, applies in its loop, reports what
// its own keep-caps flag is after each pass.
struct FakeRecorderThread {
  std::atomic<bool> stop{false};
  std::atomic<int> keepcaps_seen{-1};
  std::atomic<bool> registered{false};
  std::atomic<int> tid{0};
  std::thread thread;

  explicit FakeRecorderThread(uint32_t created_at) {
    thread = std::thread([this, created_at] {
      RecorderCapsRegisterSelf(created_at);
      tid.store(static_cast<int>(syscall(SYS_gettid)));
      registered.store(true);
      while (!stop.load()) {
        RecorderCapsApply();
        keepcaps_seen.store(prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0));
        usleep(1000);
      }
      RecorderCapsUnregisterSelf();
    });
    while (!registered.load()) usleep(100);
  }
  ~FakeRecorderThread() {
    stop.store(true);
    thread.join();
  }
};

// The thread's keep-caps flag as it last saw it, once it has made a pass
// after the call returned (the flag itself is per thread: only it can read it).
int prctl_of(FakeRecorderThread& t) {
  t.keepcaps_seen.store(-2);
  while (t.keepcaps_seen.load() == -2) usleep(100);
  return t.keepcaps_seen.load();
}

}  // namespace

TEST_CASE("recorder caps: a program's PR_SET_KEEPCAPS is taken on by our threads before the call returns") {
  RecorderCapsResetAfterFork();  // a clean table
  const int before = prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0);
  FakeRecorderThread ours(RecorderCapsCreating());
  for (unsigned long want : {1ul, 0ul}) {
    RecorderCapsAfterKeepCaps(want);
    // Returned: the thread has applied it.
    CHECK(prctl_of(ours) == static_cast<int>(want));
  }
  prctl(PR_SET_KEEPCAPS, before, 0, 0, 0);
}

TEST_CASE("recorder caps: a capset is mirrored, lowering included") {
  RecorderCapsResetAfterFork();
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct mine[2] = {};
  REQUIRE(syscall(SYS_capget, &header, mine) == 0);
  FakeRecorderThread ours(RecorderCapsCreating());
  auto theirs = [&] {
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, ours.tid.load()};
    __user_cap_data_struct d[2] = {};
    REQUIRE(syscall(SYS_capget, &h, d) == 0);
    return d[0].effective;
  };
  // The program drops CAP_SYS_NICE from its effective set (as published by
  // the hook; this thread's own sets stay): ours must drop it too.
  __user_cap_data_struct lowered[2] = {mine[0], mine[1]};
  lowered[0].effective &= ~(1u << CAP_SYS_NICE);
  RecorderCapsAfterCapset(&header, lowered);
  CHECK(theirs() == lowered[0].effective);
  // And back (allowed: the bit stayed in the permitted set).
  RecorderCapsAfterCapset(&header, mine);
  CHECK(theirs() == mine[0].effective);
  RecorderCapsResetAfterFork();
}
