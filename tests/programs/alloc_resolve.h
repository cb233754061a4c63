/* alloc_resolve.h: prints where allocator symbols resolve, shared by
 * alloc_resolve_c.c, alloc_resolve_cc.cc and plugins/new_plugin.cc.
 * One line per lookup: "<who> <how> <symbol> <library basename or none>",
 * how = default (dlsym RTLD_DEFAULT) or next (dlsym RTLD_NEXT from the
 * caller). Under the preload every line must read as it does plain, except
 * the malloc-family hooks the preload means to export (the test knows them
 * from `nm -D`).
 */
#pragma once
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static const char* const kResolveSymbols[] = {
    "malloc", "free", "calloc", "realloc", "malloc_usable_size", "posix_memalign", "aligned_alloc",
    "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc", "__libc_memalign",
    "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZnwmRKSt9nothrow_t", "_ZnwmSt11align_val_t",
    "mi_malloc", "mi_free", "mi_new_n", NULL};

/* The basename of the object holding `addr`; "main" for the executable. */
static const char* ResolveWhere(const void* addr) {
  if (!addr) return "none";
  Dl_info info;
  if (!dladdr(addr, &info) || !info.dli_fname) return "unknown";
  if (!info.dli_fname[0]) return "main";
  const char* slash = strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

static void ReportLookups(const char* who, void* next_handle) {
  for (const char* const* s = kResolveSymbols; *s; ++s) {
    printf("%s default %s %s\n", who, *s, ResolveWhere(dlsym(RTLD_DEFAULT, *s)));
    printf("%s next %s %s\n", who, *s, ResolveWhere(dlsym(next_handle, *s)));
  }
}
