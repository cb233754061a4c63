// dwarf_idle: what the symbolizer's idle debug information costs the
// program (issue #44). Loads a library whose debug sections are
// compressed, burns CPU in its phase_one, then idles until the recorder has
// let go of the library's debug information (libdw's private mapping of
// the file, rw-p at offset 0, leaves /proc/self/maps), then burns CPU in
// phase_two (new pcs: their names and lines must come back), and finally
// checks that a 256 KiB malloc of its own is still served by mmap, i.e.
// that nothing freed on the recorder's threads moved glibc's mmap
// threshold.
//
// usage: dwarf_idle LIB.so [MAPPED]
//   MAPPED: the file libdw is expected to map for LIB.so's debug information
//   (its inflated copy in the debug-file cache); LIB.so itself by default.
//   prints "dropped yes|no", "dropped again yes|no", "mmapped yes|no", "done"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef void (*burn_fn)(double);

// Whether libdw has the file mapped (privately, writable, from offset 0:
// what the dynamic loader never does).
static int libdw_maps(const char* path) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[4096];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    char perms[8] = "";
    unsigned long off = 1;
    if (sscanf(line, "%*x-%*x %7s %lx", perms, &off) == 2 && strncmp(perms, "rw-p", 4) == 0 && off == 0 &&
        strstr(line, path))
      found = 1;
  }
  fclose(f);
  return found;
}

// libdw takes the file (when the samples are described), then lets go once
// the library has been idle: waits for both, at most 60 s.
static int wait_for_drop(const char* path) {
  int seen = 0;
  for (int i = 0; i < 600; i++) {
    const int now = libdw_maps(path);
    if (seen && !now) return 1;
    seen |= now;
    usleep(100 * 1000);
  }
  return 0;
}

__attribute__((noinline, noipa)) static int run(burn_fn fn, double seconds) {
  fn(seconds);
  return 0;  // not a tail call
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 3;
  }
  burn_fn one = (burn_fn)dlsym(h, "phase_one");
  burn_fn two = (burn_fn)dlsym(h, "phase_two");
  if (!one || !two) return 4;
  char real[4096];
  if (argc > 2)
    snprintf(real, sizeof real, "%s", argv[2]);  // absolute; made by the recorder later
  else if (!realpath(argv[1], real))
    return 5;
  run(one, 0.5);
  printf("dropped %s\n", wait_for_drop(real) ? "yes" : "no");
  run(two, 0.5);
  // Loaded again for phase_two's new pcs, and let go again.
  printf("dropped again %s\n", wait_for_drop(real) ? "yes" : "no");
  struct mallinfo2 before = mallinfo2();
  void* volatile big = malloc(256 << 10);  // volatile: the pair must not be optimised away
  struct mallinfo2 after = mallinfo2();
  printf("mmapped %s\n", after.hblkhd >= before.hblkhd + (256 << 10) ? "yes" : "no");
  free(big);
  printf("done\n");
  fflush(stdout);
  return 0;
}
