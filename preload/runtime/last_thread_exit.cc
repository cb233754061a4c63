// Last application thread: see last_thread_exit.h.
#include "preload/runtime/last_thread_exit.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "preload/runtime/exit_keeper.h"
#include "preload/runtime/proc_stat.h"
#include "preload/fds/fd_guard.h"
#include "preload/threads/thread_registry.h"

namespace flightrec {
namespace {

constexpr uint64_t kMs = 1000000ull;
// After a thread exit, rescan every 20 ms for a while: the exiting thread has
// run our destructor but may not be gone yet. Otherwise once a second, for
// threads that leave without destructors (a raw exit system call).
constexpr uint64_t kFastRescanNs = 20 * kMs;
constexpr uint64_t kFastWindowNs = 500 * kMs;
constexpr uint64_t kSlowRescanNs = 1000 * kMs;

std::atomic<bool> g_main_gone{false};
bool g_main_gone_raw = false;  // seen as a zombie, no destructor ran (flush thread only)
int g_main_status = 0;
uint64_t g_last_main_check_ns = 0;
std::atomic<uint64_t> g_exits{0};  // application thread exits seen
uint64_t g_exits_scanned = ~uint64_t{0};
uint64_t g_last_scan_ns = 0;
uint64_t g_last_exit_seen_ns = 0;

void OnThreadExit(ThreadState* ts) {
  // The main thread runs key destructors only when it leaves through
  // pthread_exit or cancellation (returning from main calls exit instead).
  if (ts && ts->tid == static_cast<pid_t>(syscall(SYS_getpid))) {
    g_main_gone.store(true, std::memory_order_release);
    ExitKeeperOnMainThreadExit();  // the flush thread may have left the program's files (exit_keeper.h)
  }
  g_exits.fetch_add(1, std::memory_order_release);
}

// True if /proc/self/task/<tid> is a live thread that is not one of ours.
bool LiveApplicationThread(const char* tid) {
  char path[64];
  if (strlen(tid) > 20) return false;  // not a tid
  snprintf(path, sizeof(path), "/proc/self/task/%.20s/stat", tid);
  const int fd = OpenTransientFd(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // gone already
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  CloseTransientFd(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  // "tid (comm) S ...": comm may hold spaces and parentheses.
  const char* open_paren = strchr(buf, '(');
  const char* close_paren = strrchr(buf, ')');
  if (!open_paren || !close_paren || close_paren[1] != ' ') return true;  // unreadable: assume alive
  const char state = close_paren[2];
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  return strncmp(open_paren + 1, "flightrec-", 10) != 0;
}

// The main thread (the thread-group leader) is a zombie: it left through the
// exit system call. Its exit status is field 52 of /proc/self/stat
// (exit_code, as waitpid reports it; Linux 3.5 and later).
bool MainThreadIsZombie(int* status) {
  char buf[1024];
  const char* state = ReadOwnStatFields(buf, sizeof(buf));  // field 3
  if (!state || *state != 'Z') return false;
  int field = 3;  // the state
  long code = 0;
  for (const char* p = state; *p; ++p) {
    if (*p != ' ') continue;
    if (++field == 52) {
      code = strtol(p + 1, nullptr, 10);
      break;
    }
  }
  *status = static_cast<int>((code >> 8) & 0xff);
  return true;
}

bool AnyLiveApplicationThread() {
  const int fd = OpenTransientFd("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return true;  // cannot tell: keep the process
  bool live = false;
  alignas(8) char buf[4096];
  for (;;) {
    const long n = syscall(SYS_getdents64, fd, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n && !live;) {
      const auto* d = reinterpret_cast<const dirent64*>(buf + off);
      off += d->d_reclen;
      if (d->d_name[0] >= '0' && d->d_name[0] <= '9') live = LiveApplicationThread(d->d_name);
    }
    if (live) break;
  }
  CloseTransientFd(fd);
  return live;
}

}  // namespace

void LastThreadWatchInit() { AddThreadObserver(nullptr, OnThreadExit); }

void LastThreadWatchAtForkChild() {
  g_main_gone.store(false, std::memory_order_relaxed);
  g_main_gone_raw = false;
  g_last_main_check_ns = 0;
  g_exits_scanned = ~uint64_t{0};
  g_last_scan_ns = 0;
  g_last_exit_seen_ns = 0;
}

bool MainThreadLeft() { return g_main_gone.load(std::memory_order_acquire); }

bool ApplicationThreadsGone(uint64_t now_ns, LastThreadExit* how) {
  if (!g_main_gone.load(std::memory_order_acquire)) {
    if (now_ns - g_last_main_check_ns < kSlowRescanNs) return false;
    g_last_main_check_ns = now_ns;
    if (!MainThreadIsZombie(&g_main_status)) return false;
    g_main_gone_raw = true;
    g_main_gone.store(true, std::memory_order_release);
  }
  how->raw = g_main_gone_raw;
  how->status = g_main_status;
  const uint64_t exits = g_exits.load(std::memory_order_acquire);
  if (exits != g_exits_scanned) {
    g_exits_scanned = exits;
    g_last_exit_seen_ns = now_ns;
  } else {
    const bool recent = now_ns - g_last_exit_seen_ns < kFastWindowNs;
    if (now_ns - g_last_scan_ns < (recent ? kFastRescanNs : kSlowRescanNs)) return false;
  }
  g_last_scan_ns = now_ns;
  // Stops at the first live thread found: a few reads while any is alive.
  return !AnyLiveApplicationThread();
}

}  // namespace flightrec
