// Module ELF files for libdw: the find_elf callback of every Dwfl the
// recorder makes (the symbolizer's, and one per unloaded library). It hands
// libdw the file mapped whole and keeps no descriptor open (see the .cc).
#pragma once
#include <elfutils/libdwfl.h>

namespace flightrec::sampler {

int FindElfOwned(Dwfl_Module* mod, void** userdata, const char* name, Dwarf_Addr base, char** file_name, Elf** elfp);

}  // namespace flightrec::sampler
