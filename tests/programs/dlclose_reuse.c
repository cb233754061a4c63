/* dlclose_reuse: libraries unloaded while their samples may still wait to
 * be symbolized, and other libraries loaded where they were. The loader
 * reuses an unloaded library's addresses for the next one of the same size,
 * so a symbolizer that names pcs from the maps as they are when it gets to
 * them would name one library's samples after the other.
 *   dlclose_reuse ROUNDS SECONDS LIB...
 * Each round loads each LIB in turn (dlopen), burns SECONDS of CPU in its
 * burn(double) and unloads it (dlclose). Prints one line per load:
 *   load PATH BASE T0 T1
 * BASE the address it was loaded at (hex), [T0, T1] the CLOCK_MONOTONIC
 * nanoseconds from the dlopen call to dlclose's return: the only time its
 * code ran (its _init and _fini run inside those calls). Exits 0; 2 on bad
 * arguments, 3 if a library will not load. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef void (*burn_fn)(double);

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const int rounds = atoi(argv[1]);
  const double seconds = atof(argv[2]);
  for (int r = 0; r < rounds; r++) {
    for (int i = 3; i < argc; i++) {
      const uint64_t t0 = now_ns();
      void* lib = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
      if (!lib) return 3;
      burn_fn burn = (burn_fn)dlsym(lib, "burn");
      Dl_info info;
      if (!burn || !dladdr((void*)burn, &info)) return 3;
      burn(seconds);
      const uintptr_t base = (uintptr_t)info.dli_fbase;
      dlclose(lib);
      const uint64_t t1 = now_ns();
      printf("load %s %lx %llu %llu\n", argv[i], (unsigned long)base, (unsigned long long)t0,
             (unsigned long long)t1);
    }
  }
  return 0;
}
