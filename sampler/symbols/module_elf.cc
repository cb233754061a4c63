// Module ELF files for libdw: see module_elf.h.
#include "sampler/symbols/module_elf.h"

#include <elfutils/libdwelf.h>
#include <unistd.h>

#include "preload/fds/fd_guard.h"
#include "preload/fds/released_fds.h"
#include "sampler/symbols/debug_file_cache.h"

namespace flightrec::sampler {

// libdw would keep each module's file open until dwfl_end, one descriptor
// in the host's table per module symbolized: a service with hundreds of
// libraries would lose hundreds of fds to us, and its own files would get
// other numbers than without us. So the file is mapped whole here
// (dwelf_elf_begin, ELF_C_READ_MMAP), libelf is told it is done with the
// descriptor (ELF_C_FDREAD reads in whatever is not mapped) and the
// descriptor is closed at once; libdw gets the Elf and fd -1 (dwfl then
// neither reads nor closes any fd for the module). Only if that fails is
// the fd handed to libdw, owned like our other fds (fd_guard.h): never on
// 0-2, and kept through an application's close-every-fd, so that libdw never
// reads or closes a file of the application's that took the number.
// (Separate debug-info files cannot be handed over as an Elf: see
// Symbolizer::Impl::ReleaseDebugFds.)
int FindElfOwned(Dwfl_Module* mod, void** userdata, const char* name, Dwarf_Addr base, char** file_name, Elf** elfp) {
  OwnFdChange opening;  // libdw's open, then ours to keep
  int fd = dwfl_linux_proc_find_elf(mod, userdata, name, base, file_name, elfp);
  if (fd < 0 || *elfp) return fd >= 0 ? AvoidReleasedNumber(TakeOwnFd(fd)) : fd;
  // A module with compressed debug sections of its own: its inflated copy
  // (debug_file_cache.h); *file_name stays the module's path.
  fd = debugcache::Substitute(fd);
  Elf* elf = dwelf_elf_begin(fd);
  if (elf && elf_kind(elf) == ELF_K_ELF && elf_cntl(elf, ELF_C_FDREAD) == 0) {
    // libc's close, not the raw syscall: a sanitizer must see the number
    // released (TSan took a later perf fd on it for this file's). On our
    // threads the close hook really closes; on an exiting host thread the
    // fd is not protected and not a socket, so the hook passes it through.
    close(fd);
    *elfp = elf;
    return -1;
  }
  if (elf) elf_end(elf);
  return AvoidReleasedNumber(TakeOwnFd(fd));
}

}  // namespace flightrec::sampler
