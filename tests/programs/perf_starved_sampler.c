/* perf_starved_sampler: burns CPU while flightrec's sampler thread is held
 * off the CPU on purpose, so a test can check that the perf rings ride out
 * the starvation (docs/LIMITS.md: 250 ms at the configured rate).
 *   perf_starved_sampler BURN_MS
 * Waits for the thread that collects the samples (the sampler's own,
 * "flightrec-sampl", with FLIGHTREC_SAMPLER_THREAD=1; else the flush
 * thread, "flightrec-flush", which hosts the collection), pins it to one CPU and
 * starts a SCHED_FIFO spinner pinned to that CPU (the sampler, SCHED_OTHER at
 * nice +10, cannot run there while the spinner spins), pins itself to another
 * CPU, where it runs in SCHED_FIFO too (so its burn takes about as much wall
 * time as CPU time even on a loaded machine: the kernel hands a normal thread
 * starved by real-time ones some time after about a second), and burns its
 * own CPU time in starved_burn(), 1 ms at a time, until it
 * has burned BURN_MS in one stretch during which the sampler thread did not
 * run at all (its time on the CPU, /proc/self/task/TID/schedstat, did not
 * move: the kernel may still hand a starved normal thread a few ms a second),
 * then stops the spinner and waits (up to 10 s) for the sampler thread to
 * have run and gone back to sleep, so that exit does not find it in the middle
 * of the long collection (that is the exit path's business, not this test's).
 * Prints one line:
 *   starved STRETCH_NS BURNED_NS WINDOW_NS
 * STRETCH_NS the main thread's CPU time in that stretch, BURNED_NS its CPU
 * time in starved_burn() in all, WINDOW_NS the wall time from the spinner's
 * start to its stop. Exit 0; 2 on bad arguments; 3 when no such stretch came
 * before the spinner's 5 s limit; 77 (printing why) when it cannot starve the
 * thread here: fewer than two usable CPUs, no sampler thread within 10 s, or
 * SCHED_FIFO refused (no CAP_SYS_NICE). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_spinner_up, g_stop;
static volatile unsigned long sink;

static uint64_t ns_of(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int read_file(const char* path, char* buf, size_t len) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = 0;
  return (int)n;
}

/* The collecting thread: "flightrec-sampl" if there is one, else "flightrec-flush". */
static int find_sampler(void) {
  int found = 0, flush = 0;
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int tid = atoi(e->d_name);
    char path[64], comm[32];
    snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
    if (read_file(path, comm, sizeof(comm)) <= 0) continue;
    if (strncmp(comm, "flightrec-sampl", 15) == 0) found = tid;
    if (strncmp(comm, "flightrec-flush", 15) == 0) flush = tid;
  }
  if (d) closedir(d);
  return found ? found : flush;
}

/* The thread's time on the CPU so far (ns): schedstat's first field. */
static uint64_t ran_ns(int tid) {
  char path[64], buf[128];
  snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
  if (read_file(path, buf, sizeof(buf)) <= 0) return 0;
  return strtoull(buf, NULL, 10);
}

__attribute__((noinline)) static void starved_burn(uint64_t cpu_ns) {
  const uint64_t end = ns_of(CLOCK_THREAD_CPUTIME_ID) + cpu_ns;
  unsigned long x = 1;
  while (ns_of(CLOCK_THREAD_CPUTIME_ID) < end)
    for (int i = 0; i < 10000; ++i) x = x * 6364136223846793005ul + (unsigned long)i;
  sink = x;
}

__attribute__((noinline)) static void spin_until_stopped(void) {
  const uint64_t give_up = ns_of(CLOCK_MONOTONIC) + 5000000000ull; /* never hold a CPU for long */
  while (!atomic_load(&g_stop) && ns_of(CLOCK_MONOTONIC) < give_up) {
  }
}

/* The scheduler state letter of a thread ('S' sleeping, 'R' runnable, ...). */
static char state_of(int tid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
  if (read_file(path, buf, sizeof(buf)) <= 0) return '?';
  char* p = strrchr(buf, ')');
  return p && p[1] == ' ' ? p[2] : '?';
}

static void* spinner(void* arg) {
  (void)arg;
  atomic_store(&g_spinner_up, 1);
  spin_until_stopped();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const uint64_t burn_ns = strtoull(argv[1], NULL, 10) * 1000000ull;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2) {
    printf("skip: fewer than two CPUs\n");
    return 77;
  }
  int cpus[2], k = 0;
  for (int c = 0; c < CPU_SETSIZE && k < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus[k++] = c;
  /* The sampler thread starts when the recorder goes live (FLIGHTREC_FLUSH_MS). */
  int sampler = 0;
  for (int tries = 0; !(sampler = find_sampler()) && tries < 1000; ++tries) usleep(10000);
  if (!sampler) {
    printf("skip: no sampler thread\n");
    return 77;
  }
  cpu_set_t a, b;
  CPU_ZERO(&a);
  CPU_SET(cpus[0], &a);
  CPU_ZERO(&b);
  CPU_SET(cpus[1], &b);
  if (sched_setaffinity(sampler, sizeof(a), &a) != 0 || sched_setaffinity(0, sizeof(b), &b) != 0) {
    printf("skip: sched_setaffinity: %s\n", strerror(errno));
    return 77;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
  pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
  struct sched_param rt = {.sched_priority = 1};
  pthread_attr_setschedparam(&attr, &rt);
  pthread_attr_setaffinity_np(&attr, sizeof(a), &a);
  pthread_t t;
  const int rc = pthread_create(&t, &attr, spinner, NULL);
  if (rc != 0) {
    printf("skip: SCHED_FIFO thread: %s\n", strerror(rc));
    return 77;
  }
  while (!atomic_load(&g_spinner_up)) usleep(1000);
  struct sched_param other = {.sched_priority = 0};
  if (sched_setscheduler(0, SCHED_FIFO, &rt) != 0) {
    atomic_store(&g_stop, 1);
    pthread_join(t, NULL);
    printf("skip: SCHED_FIFO: %s\n", strerror(errno));
    return 77;
  }
  /* From here the sampler thread should not run: it shares its only CPU
   * with a real-time spinner. */
  const uint64_t w0 = ns_of(CLOCK_MONOTONIC);
  uint64_t burned = 0, stretch = 0, seen = ran_ns(sampler);
  while (stretch < burn_ns && ns_of(CLOCK_MONOTONIC) - w0 < 4500000000ull) {
    const uint64_t c0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
    starved_burn(1000000);
    const uint64_t used = ns_of(CLOCK_THREAD_CPUTIME_ID) - c0;
    burned += used;
    const uint64_t now = ran_ns(sampler);
    stretch = now == seen ? stretch + used : 0;
    seen = now;
  }
  const uint64_t window = ns_of(CLOCK_MONOTONIC) - w0;
  sched_setscheduler(0, SCHED_OTHER, &other);
  atomic_store(&g_stop, 1);
  pthread_join(t, NULL);
  for (int tries = 0; tries < 1000 && (ran_ns(sampler) == seen || state_of(sampler) != 'S'); ++tries) usleep(10000);
  printf("starved %llu %llu %llu\n", (unsigned long long)stretch, (unsigned long long)burned,
         (unsigned long long)window);
  if (stretch < burn_ns) return 3;
  return 0;
}
