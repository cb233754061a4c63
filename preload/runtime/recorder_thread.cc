// Recorder threads: see recorder_thread.h.
#include "preload/runtime/recorder_thread.h"

#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "format/own_fds.h"
#include "preload/crash/signal_mask.h"
#include "preload/runtime/log.h"
#include "preload/runtime/recorder_caps.h"
#include "preload/runtime/runtime_state.h"
#include "preload/runtime/thread_allowance.h"
#include "preload/threads/thread_registry.h"

namespace flightrec {
namespace {

struct Start {
  void* (*fn)(void*);
  void* arg;
  char name[16];
  uint32_t caps_created_at;  // recorder_caps.h
  // A thread shares its creator's descriptor table: one made by a thread
  // with a table of its own keeps that table's marks (own_fd_table.h).
  bool own_fd_table;
};

void* Trampoline(void* p) {
  Start s = *static_cast<Start*>(p);
  delete static_cast<Start*>(p);
  MarkRecorderThread();
  format::t_own_fd_table = s.own_fd_table;
  pthread_setname_np(pthread_self(), s.name);
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  RecorderCapsRegisterSelf(s.caps_created_at);  // the program's capsets are made here too (recorder_caps.h)
  // The recorder's heap throws std::bad_alloc when memory runs out
  // (recorder_heap.h): this thread ends and recording stops; the host goes on.
  void* ret = nullptr;
  try {
    ret = s.fn(s.arg);
  } catch (const std::bad_alloc&) {
    SetRuntimeRecording(false);
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) Log(LogLevel::kWarn, "recording off: out of memory in %s", s.name);
  }
  RecorderCapsUnregisterSelf();
  return ret;
}

}  // namespace

void LiftRecorderThread(pid_t tid) {
  if (tid <= 0) return;
  const int saved_errno = errno;
  const int policy = sched_getscheduler(0);
  sched_param param{};
  if ((policy == SCHED_FIFO || policy == SCHED_RR) && sched_getparam(0, &param) == 0) {
    sched_setscheduler(tid, policy, &param);
  } else {
    errno = 0;
    const int mine = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
    if (errno == 0) setpriority(PRIO_PROCESS, static_cast<id_t>(tid), mine);
  }
  errno = saved_errno;
}

void SettleRecorderThread() {
  const int saved_errno = errno;
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  if (sched_getscheduler(0) != SCHED_OTHER) {
    sched_param param{};
    sched_setscheduler(self, SCHED_OTHER, &param);
  }
  setpriority(PRIO_PROCESS, static_cast<id_t>(self), 10);
  errno = saved_errno;
}

PthreadCreateFn RealPthreadCreate() {
  static PthreadCreateFn real = [] {
    auto fn = reinterpret_cast<PthreadCreateFn>(dlsym(RTLD_NEXT, "pthread_create"));
    if (!fn) fn = reinterpret_cast<PthreadCreateFn>(dlsym(RTLD_DEFAULT, "pthread_create"));
    return fn;
  }();
  return real;
}

__thread bool t_creating_recorder_thread __attribute__((tls_model("initial-exec"))) = false;

namespace {
// Sanitizer builds (make check-preload-asan) go through the process-wide
// pthread_create, i.e. the sanitizer's interceptor ahead of our hook, so the
// sanitizer knows our threads (their stacks are otherwise reused with stale
// poison). Production builds call libc directly, as they always have.
PthreadCreateFn RecorderPthreadCreate() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  static PthreadCreateFn global = reinterpret_cast<PthreadCreateFn>(dlsym(RTLD_DEFAULT, "pthread_create"));
  if (global) return global;
#endif
  return RealPthreadCreate();
}
}  // namespace

int CreateRecorderThread(pthread_t* thread, const char* name, void* (*fn)(void*), void* arg) {
  PthreadCreateFn create = RecorderPthreadCreate();
  if (!create) return ENOSYS;
  // The program may have lowered RLIMIT_NPROC since start: the threads it
  // allows are the program's (thread_allowance.h).
  if (!NprocStillLeavesRoom("it starts no more threads of its own")) {
    return kRefusedForNproc;
  }
  auto* s = new (std::nothrow) Start{fn, arg, {}, 0, format::t_own_fd_table};
  if (!s) return ENOMEM;
  strncpy(s->name, name, sizeof(s->name) - 1);
  // Block everything while creating so the new thread starts with all signals
  // blocked; the creating thread's mask is restored right after.
  sigset_t all, old;
  sigfillset(&all);
  RealPthreadSigmask(SIG_SETMASK, &all, &old);
  t_creating_recorder_thread = true;  // our pthread_create hook, if reached, must not register it
  s->caps_created_at = RecorderCapsCreating();
  const int rc = create(thread, nullptr, Trampoline, s);
  if (rc != 0) RecorderCapsCreateFailed();
  t_creating_recorder_thread = false;
  RealPthreadSigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) delete s;
  return rc;
}

}  // namespace flightrec
