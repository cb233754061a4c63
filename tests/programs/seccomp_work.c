/* seccomp_work: a sandboxed program whose seccomp filter kills the process
 * on process_vm_readv, a call it never makes itself, for
 * tests/integration/test_host_safety_limits.py (the recorder used to make it
 * on the program's threads and die of SIGSYS, exit 159).
 *
 *   seccomp_work prctl SECONDS    installs the filter with prctl(PR_SET_SECCOMP)
 *                                 on the main thread, then works
 *   seccomp_work tsync SECONDS    installs it with seccomp(2) and
 *                                 SECCOMP_FILTER_FLAG_TSYNC: every thread of
 *                                 the process, the recorder's too
 *   seccomp_work launch SECONDS   installs it, then execs `seccomp_work none
 *                                 SECONDS` (a filter older than the recorder)
 *   seccomp_work none SECONDS     works without installing anything
 *
 * Work: two threads allocate and burn CPU in burn_in_sandbox for SECONDS,
 * then it prints "done" and exits 0. The filter is written by hand (no
 * libseccomp): a wrong architecture is killed too. */
#define _GNU_SOURCE
#include "burn_common.h"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

static struct sock_filter filter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};

static int install(int tsync) {
  struct sock_fprog prog = {(unsigned short)(sizeof(filter) / sizeof(filter[0])), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  if (tsync) return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

static volatile int stop;

__attribute__((noinline)) static void burn_in_sandbox(void) { BURN_CPU(0.005, 1000); }

static void* worker(void* arg) {
  (void)arg;
  while (!stop) {
    for (int i = 0; i < 256; i++) {
      char* p = malloc(64 + (size_t)i * 48);
      if (p) p[0] = (char)i;
      free(p);
    }
    burn_in_sandbox();
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const char* mode = argv[1];
  if (strcmp(mode, "prctl") == 0 || strcmp(mode, "launch") == 0) {
    if (install(0) != 0) return perror("prctl"), 3;
  } else if (strcmp(mode, "tsync") == 0) {
    if (install(1) != 0) return perror("seccomp"), 3;
  } else if (strcmp(mode, "none") != 0) {
    return 2;
  }
  if (strcmp(mode, "launch") == 0) {
    execl("/proc/self/exe", argv[0], "none", argv[2], (char*)NULL);
    return perror("exec"), 4;
  }
  const double seconds = atof(argv[2]);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, worker, NULL) != 0) return 5;
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    for (int i = 0; i < 64; i++) free(malloc(100 + (size_t)i * 100));
    usleep(5000);
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) * 1e-9 < seconds);
  stop = 1;
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("done\n");
  return 0;
}
