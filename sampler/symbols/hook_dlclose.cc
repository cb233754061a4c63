// dlclose hook: records each library the host unloads, where it lay and
// when (sampler/symbols/code_unloads.h says why). Only dlclose: it takes a handle,
// so interposing it changes nothing for the caller. dlopen is left alone on
// purpose: glibc resolves a dlopen'd name against the RPATH/RUNPATH of the
// object that called it, and through a hook that caller would be us. A load
// needs no notice anyway: a pc in no known mapping makes the symbolizer
// re-read the maps.
//
// Not a hot path: dlclose takes the loader's lock and may unmap memory. The
// hook adds two walks of the loaded objects (dl_iterate_phdr), no
// allocation, and holds no lock of ours across the real call (a library's
// destructor may dlclose another).
#include <dlfcn.h>
#include <link.h>

#include <cstring>

#include "preload/runtime/clock.h"
#include "sampler/symbols/code_unloads.h"

namespace {
using flightrec::sampler::UnloadedObject;
using DlcloseFn = int (*)(void*);

DlcloseFn RealDlclose() {
  static DlcloseFn real = reinterpret_cast<DlcloseFn>(dlsym(RTLD_NEXT, "dlclose"));
  return real;
}

struct Search {
  uint64_t bias;
  const char* name;
  UnloadedObject* out;  // filled when found (may be null: only asking)
  bool found;
};

int FindObject(dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<Search*>(data);
  // (At most the length a record keeps: the second search has the record's copy.)
  constexpr size_t kKept = sizeof(UnloadedObject::path) - 1;
  if (info->dlpi_addr != s->bias || !info->dlpi_name || strncmp(info->dlpi_name, s->name, kKept) != 0) return 0;
  s->found = true;
  if (!s->out) return 1;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uint64_t align = ph.p_align > 1 ? ph.p_align : 1;
    if (lo == UINT64_MAX) lo = info->dlpi_addr + (ph.p_vaddr & ~(align - 1));
    hi = info->dlpi_addr + ph.p_vaddr + ph.p_memsz;
  }
  if (lo == UINT64_MAX) return 1;
  s->out->bias = info->dlpi_addr;
  s->out->lo = lo;
  s->out->hi = (hi + 4095) & ~uint64_t{4095};
  strncpy(s->out->path, s->name, kKept);
  return 1;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int dlclose(void* handle) {
  const DlcloseFn real = RealDlclose();
  if (!real) return -1;  // (dlsym cannot fail for a libc function)
  // What the handle is, asked before the loader may forget it. Not for the
  // pseudo-handles, which dlinfo does not accept either.
  UnloadedObject obj;
  link_map* map = nullptr;
  bool known = false;
  if (handle && handle != RTLD_NEXT && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
      map->l_name[0]) {
    Search s{map->l_addr, map->l_name, &obj, false};
    dl_iterate_phdr(FindObject, &s);
    known = s.found && obj.hi > obj.lo;
  }
  const int rc = real(handle);
  if (known) {
    // Still there (other handles hold it, or RTLD_NODELETE): nothing moved.
    Search s{obj.bias, obj.path, nullptr, false};
    dl_iterate_phdr(FindObject, &s);
    if (!s.found) {
      // After the call returned: the library's destructors ran inside it, on
      // its code, so their samples belong before the boundary.
      obj.time_ns = flightrec::MonotonicNs();
      flightrec::sampler::NoteCodeUnloaded(obj);
    }
  }
  return rc;
}
