/* alloc_resolve_c: a C program (no libstdc++) that reports where allocator
 * symbols resolve (alloc_resolve.h), then, given a plugin path, dlopens that
 * C++ plugin the way python3 loads an extension (RTLD_LOCAL) and lets it
 * report what its own operator new/delete and malloc bind to, and run
 * malloc_usable_size on `new int[4]` (issue #34: segfaulted under the
 * preload when mimalloc's operator new joined the global scope).
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "alloc_resolve.h"

int main(int argc, char** argv) {
  ReportLookups("c", RTLD_NEXT);
  if (argc > 1) {
    void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!plugin) {
      printf("dlopen failed: %s\n", dlerror());
      return 2;
    }
    void (*run)(void) = (void (*)(void))dlsym(plugin, "plugin_run");
    if (!run) return 3;
    run();
  }
  fflush(stdout);
  return 0;
}
