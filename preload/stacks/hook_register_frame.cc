// Interposers for libgcc's frame registration: __register_frame and the
// __register_frame_info family. JITs (LLVM ORC, Julia, embedded runtimes)
// call them to make exceptions unwind through the code they generate.
//
// Why we care: until the first registration, libgcc finds unwind tables
// lock-free (_dl_find_object); from then on every lookup takes libgcc's
// global object_mutex, and libgcc calls malloc while it holds it. A stack
// captured in place with libgcc's unwinder from our malloc hook (or from the
// pthread_mutex_lock hook timing that very mutex) would take it again and
// hang the thread. So the first registration switches every in-place capture
// to libunwind's unwinder for good (local_stack.h), before libgcc's lock
// is ever taken, and then forwards the call unchanged.
#include <dlfcn.h>

#include <atomic>

#include "preload/stacks/local_stack.h"

#define FR_HOOK extern "C" __attribute__((visibility("default")))

namespace {

template <typename Fn>
Fn Next(std::atomic<Fn>* slot, const char* name) {
  Fn fn = slot->load(std::memory_order_acquire);
  if (!fn) {
    fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
    slot->store(fn, std::memory_order_release);
  }
  return fn;
}

using OneArgFn = void (*)(void*);
using InfoFn = void (*)(const void*, void*);
using InfoBasesFn = void (*)(const void*, void*, void*, void*);

std::atomic<OneArgFn> g_register_frame, g_register_frame_table;
std::atomic<InfoFn> g_register_frame_info, g_register_frame_info_table;
std::atomic<InfoBasesFn> g_register_frame_info_bases, g_register_frame_info_table_bases;

}  // namespace

FR_HOOK void __register_frame(void* begin) {
  flightrec::stacks::NoteLibgccFramesRegistered();
  if (OneArgFn next = Next(&g_register_frame, "__register_frame")) next(begin);
}

FR_HOOK void __register_frame_table(void* begin) {
  flightrec::stacks::NoteLibgccFramesRegistered();
  if (OneArgFn next = Next(&g_register_frame_table, "__register_frame_table")) next(begin);
}

FR_HOOK void __register_frame_info(const void* begin, void* object) {
  flightrec::stacks::NoteLibgccFramesRegistered();
  if (InfoFn next = Next(&g_register_frame_info, "__register_frame_info")) next(begin, object);
}

FR_HOOK void __register_frame_info_table(const void* begin, void* object) {
  flightrec::stacks::NoteLibgccFramesRegistered();
  if (InfoFn next = Next(&g_register_frame_info_table, "__register_frame_info_table")) next(begin, object);
}

FR_HOOK void __register_frame_info_bases(const void* begin, void* object, void* tbase, void* dbase) {
  flightrec::stacks::NoteLibgccFramesRegistered();
  if (InfoBasesFn next = Next(&g_register_frame_info_bases, "__register_frame_info_bases"))
    next(begin, object, tbase, dbase);
}

FR_HOOK void __register_frame_info_table_bases(const void* begin, void* object, void* tbase, void* dbase) {
  flightrec::stacks::NoteLibgccFramesRegistered();
  if (InfoBasesFn next = Next(&g_register_frame_info_table_bases, "__register_frame_info_table_bases"))
    next(begin, object, tbase, dbase);
}
