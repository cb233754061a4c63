// SymbolIndex: one module's ELF symbols sorted by address, for the pc ->
// function-name lookups the symbolizer makes where DWARF has no answer
// (stripped binaries, libc without debug info, code outside any CU).
//
// Why not dwfl_module_addrinfo: it walks the whole symbol table on every
// call (elfutils 0.188, dwfl_module_addrsym.c), so each pc the symbolizer
// has not seen costs time in proportion to the module's symbol count:
// ~10 us for redis-server's 4,300 symbols, a millisecond for a large C++
// service. This index is built once per module (one pass and a sort) and
// answers in O(log n).
//
// Which symbol a pc gets, mirroring dwfl_module_addrinfo's choice:
//  * candidates are defined symbols other than sections, files and TLS
//    templates, at their load addresses (dwfl_module_getsym_info);
//  * the innermost sized symbol that contains the pc wins; several at one
//    address (aliases) are ranked global > weak > local, then the first in
//    table order;
//  * failing that, the nearest zero-sized symbol below the pc (assembly
//    labels), unless a sized symbol ends between it and the pc or the pc is
//    outside the label's section;
//  * a pc in a gap after a sized symbol (padding) has no name.
//
// Names point into libdw's string tables: an index lives only as long as
// its module is reported (Symbolizer::Impl drops every index on re-report).
// Flush thread only (the symbolizer's thread); not async-signal-safe.
#pragma once
#include <elfutils/libdwfl.h>

#include <cstdint>

#include "format/mi_containers.h"

namespace flightrec::sampler {

class SymbolIndex {
 public:
  // What a lookup answers; empty (name null, false) when no symbol names the pc.
  struct Match {
    uint64_t addr = 0;  // load address of the symbol's start
    uint64_t size = 0;  // st_size (0: extent unknown)
    const char* name = nullptr;
    explicit operator bool() const { return name != nullptr; }
  };

  // Reads every symbol of mod (.symtab, else .dynsym, plus the auxiliary
  // MiniDebugInfo table libdw merges in). An unreadable table gives an empty
  // index.
  void Build(Dwfl_Module* mod);

  // The symbol that pc lies in (see the rules above).
  Match Find(uint64_t pc) const;

  size_t size() const { return entries_.size(); }

 private:
  // One entry per address, 24 bytes: positions are 32-bit offsets from the
  // module's load address (base_), which every module's code fits in. A
  // process holds one index per sampled module for its life (a forked child
  // shares its parent's, copy-on-write): 1 MiB in a PostgreSQL backend at 40
  // bytes an entry. Symbols that lie below the module or 4 GiB past its
  // start (absolute symbols: no pc of the module is theirs) are left out.
  struct Entry {
    uint32_t addr = 0;
    uint32_t size = 0;  // st_size, capped at 4 GiB - 1
    // The highest end (addr + size) of any sized symbol at or before this
    // one in the index: a backwards scan for the symbol containing a pc can
    // stop where reach <= pc, since nothing further back gets that far.
    uint32_t reach = 0;
    // For a sizeless symbol: where its section ends. It names no pc at or
    // past this (0: none at all).
    uint32_t limit = 0;
    const char* name = nullptr;
  };
  static_assert(sizeof(Entry) == 24);

  uint64_t base_ = 0;
  format::MiVector<Entry> entries_;  // sorted by addr
};

}  // namespace flightrec::sampler
