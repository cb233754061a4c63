/* alloc_limit: a small C program for address-space limits (ulimit -v).
 * Allocates and touches 16 blocks of 1 MiB, prints how many it got and
 * exits 0 when it got all of them, 1 otherwise. Under the preload it must
 * print and exit exactly as it does plain (tests/integration/
 * test_host_safety_alloc.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  enum { kBlocks = 16, kBlock = 1 << 20 };
  char* blocks[kBlocks];
  int got = 0;
  for (; got < kBlocks; ++got) {
    blocks[got] = malloc(kBlock);
    if (!blocks[got]) break;
    memset(blocks[got], got + 1, kBlock);
  }
  printf("got %d of %d blocks\n", got, kBlocks);
  for (int i = 0; i < got; ++i) free(blocks[i]);
  return got == kBlocks ? 0 : 1;
}
