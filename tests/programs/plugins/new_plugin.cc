/* new_plugin: a C++ plugin for alloc_resolve_c (built as
 * build/programs/libnew_plugin.so). Reports what its own references to
 * operator new/delete, malloc and malloc_usable_size are bound to, then the
 * issue #34 reproducer: malloc_usable_size on `new int[4]` (prints 24 with
 * glibc; crashed when operator new came from the preload's mimalloc).
 */
#include <malloc.h>
#include <stdlib.h>

#include <new>

#include "../alloc_resolve.h"

extern "C" __attribute__((visibility("default"))) void plugin_run() {
  ReportLookups("plugin", RTLD_NEXT);
  void* (*op_new)(size_t) = &::operator new;
  void* (*op_new_array)(size_t) = &::operator new[];
  void (*op_delete)(void*) noexcept = &::operator delete;
  void* (*c_malloc)(size_t) = &malloc;
  size_t (*usable)(void*) = &malloc_usable_size;
  printf("plugin bound _Znwm %s\n", ResolveWhere(reinterpret_cast<void*>(op_new)));
  printf("plugin bound _Znam %s\n", ResolveWhere(reinterpret_cast<void*>(op_new_array)));
  printf("plugin bound _ZdlPv %s\n", ResolveWhere(reinterpret_cast<void*>(op_delete)));
  printf("plugin bound malloc %s\n", ResolveWhere(reinterpret_cast<void*>(c_malloc)));
  printf("plugin bound malloc_usable_size %s\n", ResolveWhere(reinterpret_cast<void*>(usable)));
  fflush(stdout);
  int* p = new int[4];
  printf("plugin usable %zu\n", malloc_usable_size(p));
  delete[] p;
  fflush(stdout);
}
