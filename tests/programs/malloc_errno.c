/* Successful malloc/calloc/realloc/free calls must leave errno as they found
 * it (POSIX: free never changes errno; a successful allocation has no reason
 * to). Sets errno to a marker before each call and counts the calls after
 * which it changed. Prints "changed N of M" and exits 0. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  const long calls = argc > 1 ? atol(argv[1]) : 200000;
  long changed = 0, total = 0;
  void* keep[64] = {0};
  for (long i = 0; i < calls; ++i) {
    const size_t size = 16 + (size_t)(i * 7919 % 8192);
    errno = 4242;
    void* p = (i % 3 == 0) ? calloc(1, size) : malloc(size);
    if (!p) return 2;
    total++;
    if (errno != 4242) changed++;
    errno = 4242;
    p = realloc(p, size + 64);
    if (!p) return 2;
    total++;
    if (errno != 4242) changed++;
    const int slot = (int)(i % 64);
    errno = 4242;
    free(keep[slot]);
    total++;
    if (errno != 4242) changed++;
    keep[slot] = p;
  }
  for (int s = 0; s < 64; ++s) free(keep[s]);
  printf("changed %ld of %ld\n", changed, total);
  return 0;
}
