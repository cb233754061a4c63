/* deep_stack DEPTH: recurses DEPTH frames through deep_recurse(), then at
 * the bottom burns 0.4 s of CPU in deep_burn() and allocates 64 blocks of
 * 64 KiB in deep_alloc() (freed at the end). For stacks deeper than a
 * recorder keeps: the trace must say they were cut, not show a deep frame
 * as the root. Prints "depth=DEPTH". */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "burn_common.h"

static void* blocks[64];

__attribute__((noinline, noipa)) void deep_burn(void) { BURN_CPU(0.4, 20000); }

__attribute__((noinline, noipa)) void deep_alloc(void) {
  for (int i = 0; i < 64; ++i) {
    blocks[i] = malloc(64 * 1024);
    ((volatile char*)blocks[i])[0] = 1;
  }
}

__attribute__((noinline, noipa)) int deep_recurse(int n) {
  if (n <= 0) {
    deep_burn();
    deep_alloc();
    return 0;
  }
  const int r = deep_recurse(n - 1);
  burn_sink += (uint64_t)r; /* not a tail call */
  return r + 1;
}

int main(int argc, char** argv) {
  const int depth = argc > 1 ? atoi(argv[1]) : 300;
  deep_recurse(depth);
  for (int i = 0; i < 64; ++i) free(blocks[i]);
  printf("depth=%d\n", depth);
  return 0;
}
