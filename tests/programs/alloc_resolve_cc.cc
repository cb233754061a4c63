/* alloc_resolve_cc: the C++ side of alloc_resolve_c: a program linked with
 * libstdc++ reports where allocator symbols resolve (alloc_resolve.h) and
 * where its own operator new/delete references are bound, then uses them.
 */
#include <malloc.h>

#include <new>

#include "alloc_resolve.h"

int main() {
  ReportLookups("cc", RTLD_NEXT);
  void* (*op_new)(size_t) = &::operator new;
  void (*op_delete)(void*) noexcept = &::operator delete;
  printf("cc bound _Znwm %s\n", ResolveWhere(reinterpret_cast<void*>(op_new)));
  printf("cc bound _ZdlPv %s\n", ResolveWhere(reinterpret_cast<void*>(op_delete)));
  int* p = new int[4];
  printf("cc usable %zu\n", malloc_usable_size(p));
  delete[] p;
  fflush(stdout);
  return 0;
}
