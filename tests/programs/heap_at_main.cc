/* heap_at_main: the program's own heap (glibc's main arena) as main finds
 * it, and where its first allocations land. A recorder that builds its
 * state in the program's heap, or frees into it from its own thread while
 * the program runs, changes these.
 *   heap_at_main
 * Prints "inuse BYTES", "free_chunks N" (mallinfo2 at the top of main) and
 * "usable SIZE USABLE" for a few small allocations. Exits 0. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include <string>

int main() {
  const struct mallinfo2 m = mallinfo2();
  printf("inuse %zu\n", m.uordblks);
  printf("free_chunks %zu\n", m.ordblks);
  static const size_t kSizes[] = {16, 24, 40, 100, 1000};
  for (size_t size : kSizes) {
    void* p = malloc(size);
    printf("usable %zu %zu\n", size, malloc_usable_size(p));
  }
  std::string s(200, 'x');  // operator new too
  printf("usable string %zu\n", malloc_usable_size(s.data()));
  return 0;
}
