// unwind_linked: a program linked with libunwind.so.8 itself, as programs
// with their own crash reporters are (and gperftools' libtcmalloc). Burns CPU
// in spin() for the sampler, then walks its own stack with libunwind and
// prints the sum and the depth it found.
//
// libunwind.so.8 then comes ahead of the preload's libunwind-x86_64.so.8 in
// the lookup order, and it exports functions of the same names: the
// recorder must use its own library's, or its first unwind calls address 0.
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static int own_depth(void) {
  unw_context_t context;
  unw_cursor_t cursor;
  if (unw_getcontext(&context) != 0 || unw_init_local(&cursor, &context) != 0) return -1;
  int frames = 0;
  while (unw_step(&cursor) > 0) frames++;
  return frames;
}

__attribute__((noinline)) static unsigned long spin(unsigned long n) {
  volatile unsigned long sum = 0;
  for (unsigned long i = 0; i < n; i++) sum += i;
  return sum;
}

int main(int argc, char** argv) {
  const unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 300000000UL;
  const unsigned long sum = spin(n);
  printf("sum %lu own_depth %d\n", sum, own_depth() > 0);
  return 0;
}
