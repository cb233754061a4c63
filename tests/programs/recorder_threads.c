/* recorder_threads: which threads of flightrec's a process has, and that
 * the program's atexit handlers still write to its own files when main has
 * left through pthread_exit and the last thread ends the process.
 *
 * A worker burns 0.3 s of CPU (the recorder goes live and samples it), then
 * prints the names of the process's threads that are flightrec's
 * ("recorder: flightrec-flush ..."), sorted. With "main_exit", main prints
 * a line (kept in stdout's buffer) and leaves through pthread_exit before
 * the worker looks: glibc's exit(0) on the last thread then runs the atexit
 * handler, which prints "atexit ran" and flushes stdout, buffered line and
 * all. Under the preload that exit is the recorder's to make, on a thread
 * whose descriptor table is the program's.
 * usage: recorder_threads [main_exit] */
#define _GNU_SOURCE
#include "burn_common.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_main_exit;
static pthread_barrier_t g_main_gone;

__attribute__((noinline, noipa)) static void worker_burn(double s) { BURN_CPU(s, 100000); }

static int by_name(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

static void print_recorder_threads(void) {
  char* names[64];
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  while (d && (e = readdir(d)) && n < 64) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300], comm[32] = {0};
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof(comm), f)) {
      comm[strcspn(comm, "\n")] = 0;
      if (!strncmp(comm, "flightrec-", 10)) names[n++] = strdup(comm);
    }
    fclose(f);
  }
  if (d) closedir(d);
  qsort(names, (size_t)n, sizeof(names[0]), by_name);
  printf("recorder:");
  for (int i = 0; i < n; i++) printf(" %s", names[i]);
  printf("\n");
}

static void* worker(void* arg) {
  (void)arg;
  name_thread("worker", 0);
  worker_burn(0.3);
  if (g_main_exit) {
    pthread_barrier_wait(&g_main_gone);
    usleep(100 * 1000); /* main is gone: its key destructors ran */
  }
  print_recorder_threads();
  return NULL;
}

static void at_exit(void) {
  printf("atexit ran\n");
  fflush(stdout);
}

int main(int argc, char** argv) {
  g_main_exit = argc > 1 && !strcmp(argv[1], "main_exit");
  setvbuf(stdout, NULL, _IOFBF, 1 << 16); /* only exit's flush writes it out */
  atexit(at_exit);
  pthread_barrier_init(&g_main_gone, NULL, 2);
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return 2;
  if (!g_main_exit) {
    pthread_join(t, NULL);
    return 0;
  }
  printf("main leaves through pthread_exit\n");
  pthread_barrier_wait(&g_main_gone);
  pthread_exit(NULL);
}
