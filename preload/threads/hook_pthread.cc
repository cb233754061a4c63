// pthread hooks: pthread_create wraps the start routine so the new thread is
// registered (name, parent, start routine) before it runs any user code,
// pthread_setname_np records renames of the calling thread, and
// pthread_cancel turns the socket hooks' direct calls off before it cancels
// anything (socket_direct.h: only libc's wrappers are cancellation points).
//
// The trampoline argument is allocated with mimalloc, never the host's malloc.
#include <dlfcn.h>
#include <mimalloc.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "preload/crash/sigprof_owner.h"
#include "preload/runtime/clock.h"
#include "preload/runtime/recorder_thread.h"
#include "preload/runtime/runtime_state.h"
#include "preload/sockets/socket_direct.h"
#include "preload/threads/thread_records.h"
#include "preload/threads/thread_registry.h"

namespace {

struct StartArgs {
  void* (*fn)(void*);
  void* arg;
  pid_t parent_tid;
  bool recorder;  // created by one of our threads (e.g. libcurl's resolver)
  // The creator's mask as the program set it: the new thread inherits the
  // real mask, where SIGPROF may be unblocked for sampling (sigprof_owner.h).
  bool app_blocks_sigprof;
};

void* StartTrampoline(void* p) {
  StartArgs a = *static_cast<StartArgs*>(p);
  mi_free(p);
  if (a.recorder) {
    flightrec::MarkRecorderThread();  // a child of a recorder thread is ours too
  } else {
    flightrec::SetAppBlocksSigprof(a.app_blocks_sigprof);
    flightrec::RegisterThreadFromHook(a.parent_tid, reinterpret_cast<uint64_t>(a.fn));
  }
  return a.fn(a.arg);
}

using SetNameFn = int (*)(pthread_t, const char*);

#if defined(__SANITIZE_THREAD__)
// TSan build (make check-preload-tsan, libtsan first in LD_PRELOAD): the
// application's pthread_create is TSan's interceptor, which reaches us with
// its own start function and a ThreadParam. TSan sets up the new thread's
// state inside that start function, and our instrumented trampoline would
// crash before it. So the trampoline goes inside: we swap the user routine
// and argument in TSan's ThreadParam (its first two fields, as in
// compiler-rt's tsan_interceptors_posix.cpp) for ours. TSan's own background
// thread (null argument) passes through untouched.
struct TsanThreadParam {
  void* (*callback)(void*);
  void* param;
};

bool StartsInTsanRuntime(void* (*fn)(void*)) {
  static const void* tsan_base = [] {
    Dl_info info;
    void* probe = dlsym(RTLD_DEFAULT, "__tsan_init");
    return probe && dladdr(probe, &info) ? info.dli_fbase : nullptr;
  }();
  Dl_info info;
  return tsan_base && dladdr(reinterpret_cast<void*>(fn), &info) && info.dli_fbase == tsan_base;
}
#endif

}  // namespace

extern "C" __attribute__((visibility("default"))) int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                                                                     void* (*fn)(void*), void* arg) {
  flightrec::PthreadCreateFn real = flightrec::RealPthreadCreate();
#if defined(__SANITIZE_THREAD__)
  TsanThreadParam* tsan = nullptr;
  if (StartsInTsanRuntime(fn)) {
    if (!arg || !flightrec::RuntimeRecording()) return real(thread, attr, fn, arg);
    tsan = static_cast<TsanThreadParam*>(arg);
  }
#endif
  if (!flightrec::RuntimeRecording()) return real(thread, attr, fn, arg);
  auto* a = static_cast<StartArgs*>(mi_malloc(sizeof(StartArgs)));
  if (!a) return real(thread, attr, fn, arg);
  a->fn = fn;
  a->arg = arg;
  a->parent_tid = static_cast<pid_t>(syscall(SYS_gettid));
  a->recorder =
      (flightrec::t_thread_flags & flightrec::kThreadFlagRecorder) != 0 || flightrec::t_creating_recorder_thread;
  a->app_blocks_sigprof = flightrec::AppBlocksSigprof();
#if defined(__SANITIZE_THREAD__)
  if (tsan) {
    a->fn = tsan->callback;
    a->arg = tsan->param;
    tsan->callback = StartTrampoline;
    tsan->param = a;
    const int rc = real(thread, attr, fn, arg);
    if (rc != 0) {
      tsan->callback = a->fn;
      tsan->param = a->arg;
      mi_free(a);
    }
    return rc;
  }
#endif
  const int rc = real(thread, attr, StartTrampoline, a);
  if (rc != 0) mi_free(a);
  return rc;
}

extern "C" __attribute__((visibility("default"))) int pthread_setname_np(pthread_t thread, const char* name) {
  static SetNameFn real = reinterpret_cast<SetNameFn>(dlsym(RTLD_NEXT, "pthread_setname_np"));
  if (!real) return ENOSYS;
  const int rc = real(thread, name);
  if (rc == 0 && pthread_equal(thread, pthread_self()) && flightrec::RuntimeRecording()) {
    flightrec::RecordWriter w(flightrec::kRecThreadName, sizeof(flightrec::ThreadNameRecord));
    if (w.ok()) {
      auto* r = new (w.data()) flightrec::ThreadNameRecord();
      r->time_ns = flightrec::MonotonicNs();
      r->tid = static_cast<int32_t>(syscall(SYS_gettid));
      strncpy(r->name, name, sizeof(r->name) - 1);
    }
  }
  return rc;
}

extern "C" __attribute__((visibility("default"))) int pthread_cancel(pthread_t thread) {
  using CancelFn = int (*)(pthread_t);
  static CancelFn real = reinterpret_cast<CancelFn>(dlsym(RTLD_NEXT, "pthread_cancel"));
  flightrec::sockdirect::DisableForCancel();
  if (!real) return ESRCH;
  return real(thread);
}
