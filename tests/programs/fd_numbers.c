/* fd_numbers: the descriptor numbers a program picks for itself, and what
 * becomes of files it puts on low numbers while it allocates.
 *   fd_numbers DIR [high]
 *   1. prints "first N": the number open() gives its first file (3 when
 *      nothing else holds a low number, as without the recorder);
 *   2. for n in 3..15 (with "high": the 64 numbers under the soft
 *      RLIMIT_NOFILE, taken as 1024 at most, where the recorder keeps its
 *      own descriptors and libunwind's address-check pipe used to sit):
 *      creates DIR/in.n holding "line n" or an empty
 *      DIR/out.n, alternating, and dup2s it onto n, as a shell does for
 *      `exec 3<in.3 4>out.4 ...`;
 *   3. allocates on two threads at several stack depths (under
 *      FLIGHTREC_ALLOC_SAMPLE_BYTES=1 every allocation is unwound in place,
 *      and libunwind checks addresses through its pipe);
 *   4. prints "in n: LINE" read through each in.n's number, and
 *      "out n: SIZE" for each out.n, from fstat on its number.
 * Exits 0; 1 on a failed call. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static int kLow = 3, kHigh = 15;

static char* volatile sink;

__attribute__((noinline)) static void allocate_at(int depth, int n) {
  if (depth > 0) {
    char pad[64];
    pad[0] = (char)depth;
    sink = pad;
    allocate_at(depth - 1, n);
    return;
  }
  for (int i = 0; i < n; ++i) {
    char* p = malloc(16 + (size_t)(i % 200));
    p[0] = 1;
    sink = p;
    free(p);
  }
}

static void* worker(void* arg) {
  (void)arg;
  for (int round = 0; round < 200; ++round) allocate_at(round % 24, 50);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) return 1;
  if (argc > 2 && strcmp(argv[2], "high") == 0) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 128) return 1;
    kHigh = (rl.rlim_cur > 1024 ? 1024 : (int)rl.rlim_cur) - 1;
    kLow = kHigh - 63;
  }
  const int first = open("/dev/null", O_RDONLY);
  printf("first %d\n", first);
  close(first);
  char path[4096];
  for (int n = kLow; n <= kHigh; ++n) {
    const int in = n % 2;
    snprintf(path, sizeof(path), "%s/%s.%d", argv[1], in ? "in" : "out", n);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 1;
    if (in) {
      char line[32];
      const int len = snprintf(line, sizeof(line), "line %d\n", n);
      if (write(fd, line, (size_t)len) != len || lseek(fd, 0, SEEK_SET) != 0) return 1;
    }
    if (fd != n) {
      if (dup2(fd, n) != n) return 1;
      close(fd);
    }
  }
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
  worker(NULL);
  pthread_join(t, NULL);
  for (int n = kLow; n <= kHigh; ++n) {
    if (n % 2) {
      char buf[64] = {0};
      const ssize_t got = read(n, buf, sizeof(buf) - 1);
      printf("in %d: %s", n, got > 0 ? buf : "(nothing)\n");
    } else {
      struct stat st;
      if (fstat(n, &st) != 0) return 1;
      printf("out %d: %lld\n", n, (long long)st.st_size);
    }
  }
  return 0;
}
