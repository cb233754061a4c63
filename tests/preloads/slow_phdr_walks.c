// slow_phdr_walks.so: a test-only preload, loaded ahead of libflightrec.so,
// that makes the recorder's own walks of the loaded objects slow:
//
//   LD_PRELOAD=build/preloads/slow_phdr_walks.so:build/libflightrec.so
//
// On a thread named "flightrec*" (the recorder's threads), dl_iterate_phdr
// sleeps 2 ms in its first callback, i.e. while glibc holds the loader's
// list lock (dl_load_write_lock). Every other thread's call, and every walk's
// result, is unchanged. The recorder's threads walk for microseconds at a
// time; this widens that window so that a test can show what a fork landing
// in it does to the child (tests/programs/fork_dlopen.c) within a few hundred
// forks instead of tens of thousands.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*walk_cb)(struct dl_phdr_info*, size_t, void*);
typedef int (*walk_fn)(walk_cb, void*);

struct slowed {
  walk_cb cb;
  void* data;
  int first;
};

static int slow_callback(struct dl_phdr_info* info, size_t size, void* arg) {
  struct slowed* s = arg;
  if (s->first) {
    s->first = 0;
    const struct timespec ts = {0, 2 * 1000 * 1000};
    syscall(SYS_nanosleep, &ts, NULL);  // the system call itself, no hook's
  }
  return s->cb(info, size, s->data);
}

int dl_iterate_phdr(walk_cb cb, void* data) {
  static walk_fn next;
  if (!next) next = (walk_fn)dlsym(RTLD_NEXT, "dl_iterate_phdr");
  char name[16] = {0};
  prctl(PR_GET_NAME, name);
  if (strncmp(name, "flightrec", 9) != 0) return next(cb, data);
  struct slowed s = {cb, data, 1};
  return next(slow_callback, &s);
}
