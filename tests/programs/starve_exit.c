/* starve_exit: exits while flightrec's sampler thread is starved. The whole
 * process is pinned to one CPU; once the sampler thread is seen asleep
 * between collections, the main thread and a spinner take that CPU in
 * SCHED_RR, so the (SCHED_OTHER, nice +10) recorder threads never run again.
 * Main burns CPU in starved_burn() (samples that only the exit path can
 * collect), prints the CLOCK_MONOTONIC time the starvation began, and exits
 * with the spinner still running. Needs CAP_SYS_NICE; prints "no-rt" and
 * exits 0 without it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void starved_burn(unsigned long n) {
  unsigned long x = 1;
  for (unsigned long i = 0; i < n; ++i) x = x * 6364136223846793005ul + i;
  sink = x;
}

__attribute__((noinline)) static void* spinner(void* arg) {
  (void)arg;
  for (;;) starved_burn(1000000);
  return NULL;
}

static int read_file(const char* path, char* buf, size_t len) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = 0;
  return (int)n;
}

/* Pins every thread of the process to `cpu`; returns the sampler's tid (0 if none). */
static int pin_all(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int sampler = 0;
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int tid = atoi(e->d_name);
    sched_setaffinity(tid, sizeof(set), &set);
    char path[64], comm[32];
    snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
    if (read_file(path, comm, sizeof(comm)) > 0 && strncmp(comm, "flightrec-sampl", 15) == 0) sampler = tid;
  }
  if (d) closedir(d);
  return sampler;
}

/* The scheduler state letter of a thread ('S' sleeping, 'R' runnable, ...). */
static char state_of(int tid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
  if (read_file(path, buf, sizeof(buf)) <= 0) return '?';
  char* p = strrchr(buf, ')');
  return p && p[1] == ' ' ? p[2] : '?';
}

int main(int argc, char** argv) {
  unsigned long work = argc > 1 ? strtoul(argv[1], NULL, 10) : 300000000ul;
  starved_burn(work / 10);  /* the recorder is up and sampling */
  /* The sampler's thread starts when the recorder goes live (its first tick,
   * or a sample ring a quarter full): burn on until it is there. */
  int sampler = pin_all(sched_getcpu());
  for (int tries = 0; !sampler && tries < 500; ++tries) {
    starved_burn(work / 100);
    sampler = pin_all(sched_getcpu());
  }
  struct sched_param rt = {.sched_priority = 1}, other = {.sched_priority = 0};
  /* In SCHED_RR on the one CPU nothing else of ours runs any more, so the
   * sampler's state is frozen: wait for a moment it is asleep between
   * collections, not preempted in the middle of one. */
  for (int tries = 0;; ++tries) {
    if (sched_setscheduler(0, SCHED_RR, &rt) != 0) {
      printf("no-rt\n");
      return 0;
    }
    if (!sampler || state_of(sampler) == 'S' || tries == 1000) break;
    sched_setscheduler(0, SCHED_OTHER, &other);
    usleep(1000);
  }
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t t;
  pthread_create(&t, NULL, spinner, NULL); /* inherits SCHED_RR and the CPU */
  starved_burn(work);
  printf("starved_from %llu sampler %s\n", (unsigned long long)t0.tv_sec * 1000000000ull + (unsigned long long)t0.tv_nsec,
         sampler ? (state_of(sampler) == 'S' ? "asleep" : "runnable") : "none");
  fflush(stdout);
  exit(0);  /* the spinner still holds the CPU */
}
