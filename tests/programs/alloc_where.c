/* alloc_where: where do the host's allocations go? Allocates 64 MiB in
 * 16 KiB blocks (below glibc's mmap threshold, so glibc's own statistics
 * count them) and prints how much glibc's heap grew: the whole 64 MiB when
 * the allocator behind the preload is glibc, ~0 when it is another one.
 * Then exercises every aligned entry point and prints whether each result
 * was aligned and usable; and, when a test shim allocator is loaded, how
 * many of the five aligned requests (posix_memalign, memalign,
 * aligned_alloc, valloc, pvalloc) reached it.
 */
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCKS 4096
#define BLOCK (16 << 10)

static void* blocks[BLOCKS];

static int aligned(void* p, size_t a) { return p && ((uintptr_t)p % a) == 0; }

int main(void) {
  struct mallinfo2 before = mallinfo2();
  for (int i = 0; i < BLOCKS; ++i) {
    blocks[i] = malloc(BLOCK);
    if (!blocks[i]) return 2;
  }
  struct mallinfo2 after = mallinfo2();
  printf("glibc_heap_growth %zu\n", (after.uordblks + after.hblkhd) - (before.uordblks + before.hblkhd));
  for (int i = 0; i < BLOCKS; ++i) free(blocks[i]);

  int (*shim_calls)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "shim_aligned_calls");
  const int shim_before = shim_calls ? shim_calls() : 0;
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  int ok = 1;
  void* p = NULL;
  ok &= posix_memalign(&p, 128, 1000) == 0 && aligned(p, 128);
  memset(p, 1, 1000);
  free(p);
  p = memalign(64, 3000);
  ok &= aligned(p, 64);
  memset(p, 2, 3000);
  free(p);
  p = aligned_alloc(256, 4096);
  ok &= aligned(p, 256);
  memset(p, 3, 4096);
  free(p);
  p = valloc(100);
  ok &= aligned(p, page);
  memset(p, 4, 100);
  free(p);
  p = pvalloc(100);
  ok &= aligned(p, page);
  memset(p, 5, page);  /* pvalloc rounds up to whole pages */
  free(p);
  p = calloc(100, 100);
  for (int i = 0; i < 10000; ++i) ok &= ((unsigned char*)p)[i] == 0;
  free(p);
  p = reallocarray(NULL, 100, 10);
  ok &= p != NULL;
  p = realloc(p, 5000);
  size_t usable = malloc_usable_size(p);
  ok &= usable == 0 || usable >= 5000;  /* 0: unknown (allocator without malloc_usable_size) */
  free(p);
  volatile size_t huge = SIZE_MAX / 2;  /* opaque: the compiler would reject the overflow */
  ok &= reallocarray(NULL, huge, 4) == NULL;
  printf("aligned %s\n", ok ? "ok" : "BAD");

  if (shim_calls) printf("shim_aligned_calls %d\n", shim_calls() - shim_before);
  return ok ? 0 : 1;
}
