/* fault_worker: a small service driven one command per line on stdin, for the
 * disk fault tests (full filesystem, output directory removed, read-only
 * output). Every command does real work and answers one line on stdout, so a
 * test can change the environment between steps and know what the program
 * did in each:
 *   work TAG ROUNDS  two threads named TAG-0 and TAG-1 each run ROUNDS rounds
 *                    of malloc/free (in fw_alloc), a 64-byte send+recv over
 *                    a socketpair and a little arithmetic (in fw_burn);
 *                    answers "TAG rounds=R sum=S" (S depends on TAG and R only)
 *   quit CODE        exits with CODE
 * End of input exits 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct job {
  char tag[12];
  int index;
  long rounds;
  uint64_t sum;
};

__attribute__((noinline)) static uint64_t fw_alloc(uint64_t h) {
  const size_t size = 64 + (size_t)(h % 4000);
  unsigned char* volatile p = malloc(size);
  memset(p, (int)(h & 0xff), size);
  const uint64_t v = p[size / 2];
  free(p);
  return v;
}

__attribute__((noinline)) static uint64_t fw_burn(uint64_t h) {
  for (int i = 0; i < 2000; ++i) h = h * 6364136223846793005ull + 1442695040888963407ull;
  return h;
}

static void* worker(void* arg) {
  struct job* j = arg;
  char name[16];
  snprintf(name, sizeof(name), "%s-%d", j->tag, j->index);
  pthread_setname_np(pthread_self(), name);
  uint64_t h = 1469598103934665603ull ^ (uint64_t)j->index;
  for (const char* c = j->tag; *c; ++c) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
  char buf[64];
  for (long r = 0; r < j->rounds; ++r) {
    h = fw_burn(h) + fw_alloc(h);
    memcpy(buf, &h, sizeof(h));
    if (send(sv[0], buf, sizeof(buf), 0) != (ssize_t)sizeof(buf)) abort();
    if (recv(sv[1], buf, sizeof(buf), MSG_WAITALL) != (ssize_t)sizeof(buf)) abort();
    uint64_t back;
    memcpy(&back, buf, sizeof(back));
    h ^= back >> 7;
  }
  close(sv[0]);
  close(sv[1]);
  j->sum = h;
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  char line[256];
  while (fgets(line, sizeof(line), stdin)) {
    char tag[12];
    long n = 0;
    if (sscanf(line, "work %11s %ld", tag, &n) == 2) {
      struct job jobs[2];
      pthread_t t[2];
      for (int i = 0; i < 2; ++i) {
        snprintf(jobs[i].tag, sizeof(jobs[i].tag), "%s", tag);
        jobs[i].index = i;
        jobs[i].rounds = n;
        pthread_create(&t[i], NULL, worker, &jobs[i]);
      }
      for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
      printf("%s rounds=%ld sum=%016llx\n", tag, n, (unsigned long long)(jobs[0].sum ^ jobs[1].sum));
    } else if (sscanf(line, "quit %ld", &n) == 1) {
      printf("bye %ld\n", n);
      exit((int)n);
    } else {
      printf("unknown command\n");
    }
  }
  return 0;
}
