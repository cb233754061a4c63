/* alloc_fork: forks repeatedly while other threads allocate and free, so
 * fork lands at arbitrary points of the hooks (mid-sample, mid-free) in
 * those threads. Each child allocates (child_work: 16 MiB kept until exit,
 * plus small churn), exits normally, and the parent checks its status.
 *
 *   alloc_fork [forks=20] [threads=3]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int g_stop;
/* Set while a child runs: the churn threads rest so the child (and its
 * recorder, which runs at low priority) gets the CPU on small machines. Fork
 * itself always happens while they churn. */
static atomic_int g_pause;
static void* volatile g_sink;

static void* churn(void* arg) {
  unsigned long x = (unsigned long)arg * 2654435761u + 1;
  void* window[32] = {0};
  while (!atomic_load(&g_stop)) {
    if (atomic_load(&g_pause)) {
      usleep(1000);
      continue;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    int slot = (int)(x % 32);
    free(window[slot]);
    window[slot] = malloc(16 + x % 8192);
    if (window[slot]) memset(window[slot], 1, 16);
  }
  for (int i = 0; i < 32; ++i) free(window[i]);
  return NULL;
}

__attribute__((noinline)) static int child_work(void) {
  char* big = malloc(16 << 20);
  if (!big) return 2;
  memset(big, 7, 4096);
  for (int i = 0; i < 10000; ++i) {
    void* p = malloc(64 + i % 512);
    if (!p) return 3;
    g_sink = p;
    free(p);
  }
  g_sink = big;  /* kept: live at exit */
  return big[100] == 7 ? 0 : 4;
}

int main(int argc, char** argv) {
  int forks = argc > 1 ? atoi(argv[1]) : 20;
  int nthreads = argc > 2 ? atoi(argv[2]) : 3;
  pthread_t th[16];
  if (nthreads > 16) nthreads = 16;
  for (int i = 0; i < nthreads; ++i) pthread_create(&th[i], NULL, churn, (void*)(long)(i + 1));
  int ok = 0;
  for (int i = 0; i < forks; ++i) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      break;
    }
    if (pid == 0) exit(child_work());
    atomic_store(&g_pause, 1);
    int status = 0;
    if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) ok++;
    else fprintf(stderr, "child %d: status %#x\n", (int)pid, status);
    atomic_store(&g_pause, 0);
    usleep(20000);  /* let the threads get busy again before the next fork */
  }
  atomic_store(&g_stop, 1);
  for (int i = 0; i < nthreads; ++i) pthread_join(th[i], NULL);
  printf("forks %d ok %d\n", forks, ok);
  return ok == forks ? 0 : 1;
}
