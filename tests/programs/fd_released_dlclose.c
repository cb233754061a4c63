/* fd_released_dlclose: the symbolizer closes a separate debug-info file's
 * descriptor early and later swallows libdw's own close of that number
 * (preload/fds/released_fds.h). This program makes the number matter:
 *   1. dlopens libresolv.so.2 (glibc's debug package gives it a separate
 *      debug file) and burns CPU in it, then waits while the samples are
 *      symbolized; lists its fds ("fd N TARGET" lines)
 *   2. opens 32 descriptors of /dev/null: they take the lowest free numbers,
 *      the released one among them
 *   3. dlcloses libresolv, dlopens PLUGIN and burns CPU in its plugin_burn():
 *      the new module makes the symbolizer re-report the modules, and libdw
 *      drops libresolv's, closing the number it thinks is its debug file
 *   4. waits, then prints "kept K/32": how many of the 32 are still open
 *      and still /dev/null
 *   fd_released_dlclose PLUGIN.so
 * Exits 0. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "burn_common.h"

typedef int (*ntol_fn)(const unsigned char*, unsigned char*, size_t);
typedef void (*burn_fn)(double);

__attribute__((noinline)) static void burn_in_resolv(ntol_fn ntol, double seconds) {
  static const unsigned char name[] = "\x03WWW\x07" "EXAMPLE\x03" "COM";
  unsigned char out[64];
  const double start = cpu_seconds();
  while (cpu_seconds() - start < seconds)
    for (int i = 0; i < 1000; i++) burn_sink += (uint64_t)ntol(name, out, sizeof(out));
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* resolv = dlopen("libresolv.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!resolv) return 3;
  ntol_fn ntol = (ntol_fn)dlsym(resolv, "ns_name_ntol");
  if (!ntol) return 4;
  burn_in_resolv(ntol, 0.4);
  usleep(500000);
  print_open_fds();
  fflush(stdout);

  int fds[32];
  for (int i = 0; i < 32; i++)
    if ((fds[i] = open("/dev/null", O_RDONLY)) < 0) return 5;

  dlclose(resolv);
  void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!plugin) return 6;
  burn_fn burn = (burn_fn)dlsym(plugin, "plugin_burn");
  if (!burn) return 7;
  burn(0.4);
  usleep(500000);

  int kept = 0;
  for (int i = 0; i < 32; i++) {
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fds[i]);
    const ssize_t n = fcntl(fds[i], F_GETFD) == -1 ? -1 : readlink(link, target, sizeof(target) - 1);
    if (n < 0) continue;
    target[n] = 0;
    kept += strcmp(target, "/dev/null") == 0;
  }
  printf("kept %d/32\n", kept);
  return 0;
}
