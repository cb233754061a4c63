/* exec_args: the execl family called where the preload's exec hooks used to
 * fail it, for tests/integration/test_host_safety_limits.py.
 *
 *   exec_args thread BYTES   a thread with a BYTES stack (16 KiB is
 *                            PTHREAD_STACK_MIN) calls execl of /bin/echo
 *                            "small-stack"; exit 3 if the thread cannot start
 *   exec_args execl|execlp|execle
 *                            /bin/sh -c 'echo $# ${FOO-unset}' with 10,000
 *                            arguments (execle: and the environment FOO=bar):
 *                            prints how many arguments the shell got
 *
 * Plain, both print what the exec'd program prints and exit 0. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define A10 "a", "a", "a", "a", "a", "a", "a", "a", "a", "a"
#define A100 A10, A10, A10, A10, A10, A10, A10, A10, A10, A10
#define A1000 A100, A100, A100, A100, A100, A100, A100, A100, A100, A100
#define A10000 A1000, A1000, A1000, A1000, A1000, A1000, A1000, A1000, A1000, A1000

#define SCRIPT "echo $# ${FOO-unset}"

static void* exec_echo(void* arg) {
  (void)arg;
  execl("/bin/echo", "echo", "small-stack", (char*)NULL);
  return (void*)1;  /* the exec failed */
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  fflush(stdout);
  if (strcmp(argv[1], "thread") == 0 && argc >= 3) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (pthread_attr_setstacksize(&attr, (size_t)strtoul(argv[2], NULL, 10)) != 0) return 4;
    pthread_t t;
    if (pthread_create(&t, &attr, exec_echo, NULL) != 0) return 3;
    void* ret = NULL;
    pthread_join(t, &ret);
    return 5;  /* only if the exec failed */
  }
  if (strcmp(argv[1], "execl") == 0) execl("/bin/sh", "sh", "-c", SCRIPT, "sh", A10000, (char*)NULL);
  if (strcmp(argv[1], "execlp") == 0) execlp("sh", "sh", "-c", SCRIPT, "sh", A10000, (char*)NULL);
  if (strcmp(argv[1], "execle") == 0) {
    char* envp[] = {"FOO=bar", NULL};
    execle("/bin/sh", "sh", "-c", SCRIPT, "sh", A10000, (char*)NULL, envp);
  }
  perror("exec");
  return 6;
}
