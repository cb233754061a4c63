/* jit_perfmap [nobody]: a tiny JIT, as node or a JVM would be to a profiler:
 * two functions copied into anonymous executable memory, named only in
 * /tmp/perf-PID.map (the perf map format: "START SIZE name", hex). Burns
 * 3 parts of CPU in jit_alpha and 1 in jit_beta, and prints each one's CPU
 * time. With "nobody", the map is handed to uid 65534 after it is written
 * (root only): a map someone else owns must not be believed.
 * The test removes the map file after the program exits. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* dec %rdi; jnz -5; ret: spins rdi times. */
static const unsigned char kSpin[] = {0x48, 0xff, 0xcf, 0x75, 0xfb, 0xc3};

typedef void (*SpinFn)(uint64_t);

static uint64_t thread_cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t burn(SpinFn fn, uint64_t ns) {
  const uint64_t start = thread_cpu_ns();
  while (thread_cpu_ns() - start < ns) fn(2000000);
  return thread_cpu_ns() - start;
}

int main(int argc, char** argv) {
  unsigned char* code = mmap(NULL, 8192, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (code == MAP_FAILED) return perror("mmap"), 1;
  memcpy(code + 256, kSpin, sizeof(kSpin));
  memcpy(code + 4096 + 512, kSpin, sizeof(kSpin));
  SpinFn alpha = (SpinFn)(void*)(code + 256), beta = (SpinFn)(void*)(code + 4096 + 512);
  char path[64];
  snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
  FILE* map = fopen(path, "w");
  if (!map) return perror(path), 1;
  fprintf(map, "%lx %zx jit_alpha\n", (unsigned long)(uintptr_t)alpha, sizeof(kSpin));
  fprintf(map, "%lx %zx jit_beta\n", (unsigned long)(uintptr_t)beta, sizeof(kSpin));
  fclose(map);
  if (argc > 1 && !strcmp(argv[1], "nobody") && chown(path, 65534, 65534) != 0) return perror("chown"), 1;
  const uint64_t a = burn(alpha, 900000000u);
  const uint64_t b = burn(beta, 300000000u);
  printf("alpha_cpu_ns %lu\nbeta_cpu_ns %lu\n", (unsigned long)a, (unsigned long)b);
  return 0;
}
