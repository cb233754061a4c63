/* fault_launch: puts a program in a hostile environment, then execs it.
 *   fault_launch [options] -- PROGRAM [ARGS...]
 *   --nofile N         RLIMIT_NOFILE (soft and hard) = N
 *   --memlock BYTES    RLIMIT_MEMLOCK (soft and hard) = BYTES, and CAP_IPC_LOCK
 *                      dropped from the bounding set: root ignores the limit
 *                      while it holds the capability, and after exec root
 *                      regains every capability of the bounding set, so
 *                      dropping it from the effective set would not last
 *   --deny-perf ERRNO  a seccomp filter makes perf_event_open fail with ERRNO
 *                      (EACCES, EPERM, ENOSYS or a number), as container
 *                      runtimes' default profiles do
 *   --env NAME=VALUE   sets NAME in PROGRAM's environment (LD_PRELOAD goes
 *                      here, so the launcher itself is not recorded)
 * Exits 127 with a message if a step fails. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static void die(const char* what) {
  fprintf(stderr, "fault_launch: %s: %s\n", what, strerror(errno));
  exit(127);
}

static int errno_value(const char* s) {
  if (strcmp(s, "EACCES") == 0) return EACCES;
  if (strcmp(s, "EPERM") == 0) return EPERM;
  if (strcmp(s, "ENOSYS") == 0) return ENOSYS;
  return atoi(s);
}

static void deny_perf(int err) {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_perf_event_open, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof(filter) / sizeof(filter[0])), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("PR_SET_NO_NEW_PRIVS");
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) die("PR_SET_SECCOMP");
}

static void set_limit(int resource, const char* value, const char* what) {
  const rlim_t v = (rlim_t)strtoull(value, NULL, 10);
  struct rlimit rl = {v, v};
  if (setrlimit(resource, &rl) != 0) die(what);
}

int main(int argc, char** argv) {
  int i = 1;
  for (; i < argc; ++i) {
    if (strcmp(argv[i], "--") == 0) {
      ++i;
      break;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "fault_launch: %s needs a value\n", argv[i]);
      return 127;
    }
    const char* v = argv[++i];
    if (strcmp(argv[i - 1], "--nofile") == 0) {
      set_limit(RLIMIT_NOFILE, v, "setrlimit(RLIMIT_NOFILE)");
    } else if (strcmp(argv[i - 1], "--memlock") == 0) {
      set_limit(RLIMIT_MEMLOCK, v, "setrlimit(RLIMIT_MEMLOCK)");
      if (prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) != 0 && errno != EINVAL) die("PR_CAPBSET_DROP");
    } else if (strcmp(argv[i - 1], "--deny-perf") == 0) {
      deny_perf(errno_value(v));
    } else if (strcmp(argv[i - 1], "--env") == 0) {
      char* eq = strchr(v, '=');
      if (!eq) {
        fprintf(stderr, "fault_launch: --env wants NAME=VALUE\n");
        return 127;
      }
      *eq = 0;
      if (setenv(v, eq + 1, 1) != 0) die("setenv");
    } else {
      fprintf(stderr, "fault_launch: unknown option %s\n", argv[i - 1]);
      return 127;
    }
  }
  if (i >= argc) {
    fprintf(stderr, "usage: fault_launch [options] -- PROGRAM [ARGS...]\n");
    return 127;
  }
  execvp(argv[i], argv + i);
  die(argv[i]);
  return 127;
}
