/* secure_probe: loads the library named in argv[1] with dlopen, the way a
 * preload reaches a secure-execution (setuid/setgid) process through
 * /etc/ld.so.preload, then reports AT_SECURE, whether libmimalloc.so.2 got
 * loaded, and what MIMALLOC_VERBOSE the process sees. Under AT_SECURE the
 * recorder must stay off and never start mimalloc (issue #29 item 15).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>

int main(int argc, char** argv) {
  printf("at_secure %lu\n", getauxval(AT_SECURE));
  if (argc > 1 && !dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL)) {
    printf("dlopen failed: %s\n", dlerror());
    return 2;
  }
  printf("mimalloc %s\n", dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_NOLOAD) ? "loaded" : "absent");
  const char* v = getenv("MIMALLOC_VERBOSE");
  printf("MIMALLOC_VERBOSE %s\n", v ? v : "(unset)");
  fflush(stdout);
  return 0;
}
