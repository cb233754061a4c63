// Released descriptors (see released_fds.h).
#include "preload/fds/released_fds.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>

#include "preload/fds/fd_guard.h"

namespace flightrec {

__thread bool t_in_released_fd_scope __attribute__((tls_model("initial-exec"))) = false;

namespace {

// A few per module with separate debug info; -1 marks a free slot. Atomics
// only so that the exiting thread taking the list over after the flush
// thread stopped reads it cleanly; one thread uses it at a time.
constexpr int kMaxReleased = 512;
std::atomic<int> g_released[kMaxReleased];
std::atomic<int> g_used{0};  // slots [0, g_used) may be taken

int Slot(int fd) {
  const int used = g_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; i++)
    if (g_released[i].load(std::memory_order_relaxed) == fd) return i;
  return -1;
}

std::atomic<int> g_hook_first{-1};  // -1 until asked

}  // namespace

bool CloseHookComesFirst() {
  int v = g_hook_first.load(std::memory_order_relaxed);
  if (v < 0) {
    // The close() that the global lookup order gives everyone (libdw
    // included) lives in our own object?
    Dl_info first{}, ours{};
    void* close_fn = dlsym(RTLD_DEFAULT, "close");
    v = close_fn && dladdr(close_fn, &first) && dladdr(reinterpret_cast<void*>(&CloseHookComesFirst), &ours) &&
        first.dli_fbase == ours.dli_fbase;
    g_hook_first.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

bool ListReleasedFd(int fd) {
  if (fd < 0) return false;
  if (Slot(fd) >= 0) return true;
  const int used = g_used.load(std::memory_order_relaxed);
  for (int i = 0; i < used; i++) {
    if (g_released[i].load(std::memory_order_relaxed) == -1) {
      g_released[i].store(fd, std::memory_order_release);
      return true;
    }
  }
  if (used == kMaxReleased) return false;
  g_released[used].store(fd, std::memory_order_relaxed);
  g_used.store(used + 1, std::memory_order_release);
  return true;
}

int AvoidReleasedNumber(int fd) {
  while (fd >= 0 && Slot(fd) >= 0) {
    const int moved = fcntl(fd, F_DUPFD_CLOEXEC, fd + 1);
    if (moved < 0) return fd;  // no number left: libdw may close this one twice
    const bool owned = IsProtectedFd(fd);
    UnprotectFd(fd);
    close(fd);  // through the close hook: ours, unprotected, outside any scope
    if (owned) ProtectFd(moved);
    fd = moved;
  }
  return fd;
}

void ForgetReleasedFds() {
  const int used = g_used.load(std::memory_order_relaxed);
  for (int i = 0; i < used; i++) g_released[i].store(-1, std::memory_order_relaxed);
  g_used.store(0, std::memory_order_release);
}

int ReleasedFdCount() {
  int n = 0;
  const int used = g_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; i++) n += g_released[i].load(std::memory_order_relaxed) != -1;
  return n;
}

bool SwallowReleasedClose(int fd) {
  const int i = Slot(fd);
  if (i < 0) return false;
  g_released[i].store(-1, std::memory_order_relaxed);
  return true;
}

}  // namespace flightrec
