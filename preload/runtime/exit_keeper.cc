// Exit keeper (see exit_keeper.h).
#include "preload/runtime/exit_keeper.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>

#include "preload/crash/crash_freeze.h"
#include "preload/crash/raw_syscall.h"
#include "preload/crash/sigprof_owner.h"
#include "preload/runtime/log.h"
#include "preload/runtime/own_work.h"
#include "preload/runtime/recorder_caps.h"
#include "preload/runtime/recorder_thread.h"

namespace flightrec {
namespace {

std::atomic<bool> g_flush_leaving{false};
std::atomic<bool> g_main_left{false};
std::atomic<bool> g_started{false};  // the keeper was created
std::atomic<bool> g_end{false};      // ExitKeeperEndsProcess asked for the exit
std::atomic<uint32_t> g_word{0};     // its futex word, bumped by every wake-up

void Wake() {
  g_word.fetch_add(1, std::memory_order_seq_cst);
  RawSyscall6(SYS_futex, reinterpret_cast<long>(&g_word), FUTEX_WAKE_PRIVATE, INT_MAX, 0, 0, 0);
}

// Sleeps until asked for the exit; applies the program's capsets and parks
// in a crash freeze like every recorder thread.
void* KeeperMain(void*) {
  CrashFreezeJoin();
  RecorderCapsSetWaker(&Wake);
  for (;;) {
    const uint32_t seen = g_word.load(std::memory_order_seq_cst);
    if (g_end.load(std::memory_order_acquire)) break;
    RecorderCapsApply();
    CrashFreezePark();
    const timespec one_second{1, 0};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g_word), FUTEX_WAIT_PRIVATE, seen, &one_second, nullptr, 0);
  }
  Log(LogLevel::kInfo, "the application's last thread has exited; ending the process (exit status 0)");
  CrashFreezeLeave();
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 0);  // atexit handlers are the host's
  exit(0);
}

void Launch() {
  if (g_started.exchange(true, std::memory_order_acq_rel)) return;
  AddCrashFreezeWaker(&Wake);
  pthread_t thread;
  int rc;
  {
    OwnWorkOnAppThread ours;  // a new thread's TLS is not the program's allocation
    rc = CreateRecorderThread(&thread, "flightrec-keep", KeeperMain, nullptr);
  }
  if (rc != 0) {
    g_started.store(false, std::memory_order_release);
    if (rc != kRefusedForNproc)
      Log(LogLevel::kWarn,
          "cannot start the exit keeper thread (error %d): output the program's atexit handlers "
          "write after its last thread ends may be lost",
          rc);
    return;
  }
  pthread_detach(thread);
}

}  // namespace

bool ExitKeeperLetFlushThreadLeave() {
  g_flush_leaving.store(true, std::memory_order_seq_cst);
  if (!g_main_left.load(std::memory_order_seq_cst)) return true;
  g_flush_leaving.store(false, std::memory_order_seq_cst);
  return false;
}

void ExitKeeperFlushThreadStayed() { g_flush_leaving.store(false, std::memory_order_seq_cst); }

void ExitKeeperOnMainThreadExit() {
  g_main_left.store(true, std::memory_order_seq_cst);
  if (g_flush_leaving.load(std::memory_order_seq_cst)) Launch();
}

bool ExitKeeperEndsProcess() {
  if (!g_started.load(std::memory_order_acquire)) return false;
  g_end.store(true, std::memory_order_release);
  Wake();
  return true;
}

void ExitKeeperAtForkChild() {
  g_flush_leaving.store(false, std::memory_order_relaxed);
  g_main_left.store(false, std::memory_order_relaxed);
  g_started.store(false, std::memory_order_relaxed);
  g_end.store(false, std::memory_order_relaxed);
  g_word.store(0, std::memory_order_relaxed);
}

}  // namespace flightrec
