// Recorder threads: see recorder_thread.h.
#include "preload/recorder_thread.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "preload/thread_registry.h"

namespace flightrec {
namespace {

struct Start {
  void* (*fn)(void*);
  void* arg;
  char name[16];
};

void* Trampoline(void* p) {
  Start s = *static_cast<Start*>(p);
  delete static_cast<Start*>(p);
  MarkRecorderThread();
  pthread_setname_np(pthread_self(), s.name);
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  return s.fn(s.arg);
}

}  // namespace

PthreadCreateFn RealPthreadCreate() {
  static PthreadCreateFn real = [] {
    auto fn = reinterpret_cast<PthreadCreateFn>(dlsym(RTLD_NEXT, "pthread_create"));
    if (!fn) fn = reinterpret_cast<PthreadCreateFn>(dlsym(RTLD_DEFAULT, "pthread_create"));
    return fn;
  }();
  return real;
}

int CreateRecorderThread(pthread_t* thread, const char* name, void* (*fn)(void*), void* arg) {
  PthreadCreateFn create = RealPthreadCreate();
  if (!create) return ENOSYS;
  auto* s = new Start{fn, arg, {}};
  strncpy(s->name, name, sizeof(s->name) - 1);
  // Block everything while creating so the new thread starts with all signals
  // blocked; the creating thread's mask is restored right after.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const int rc = create(thread, nullptr, Trampoline, s);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) delete s;
  return rc;
}

}  // namespace flightrec
