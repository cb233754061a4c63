// cpu_dlopen: loads a plugin with dlopen() after start-up and burns CPU in
// it, so the sampler must unwind through and symbolize a library it did not
// see at init. The plugin exports `void plugin_burn(double cpu_seconds)`.
//
// usage: cpu_dlopen PLUGIN.so [cpu_seconds (default 1)]   prints "plugin done"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*burn_fn)(double);

__attribute__((noinline, noipa)) int run_plugin(burn_fn fn, double seconds) {
  fn(seconds);
  return 0;  // not a tail call: run_plugin stays on the stack
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 3;
  }
  burn_fn fn = (burn_fn)dlsym(h, "plugin_burn");
  if (!fn) return 4;
  if (run_plugin(fn, argc > 2 ? atof(argv[2]) : 1.0) != 0) return 5;
  printf("plugin done\n");
  return 0;  // the plugin stays loaded until exit
}
