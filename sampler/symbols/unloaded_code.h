// UnloadedCode: the symbolizer's memory of libraries the host unloaded
// (records from code_unloads.h), so that a pc sampled before an unload is
// named after the library that was there then, not after whatever the
// loader put at that address since.
//
// Eras: era E is the time before unload number E (counted from 0 over the
// process's life) and after the one before it. The code at pc for an event
// of era E is that of the first unloaded library, from unload E on, that
// covered pc; if none did, it is what is mapped there now.
//
// Each unloaded library gets its own Dwfl (two unloaded libraries may have
// covered the same addresses), reported on first use from the file on disk
// and kept while at most kOpen are; names come from the file's own symbol
// table and DWARF (no separate debug file: it is rare that these matter).
// Flush thread only, like the symbolizer.
#pragma once
#include <elfutils/libdwfl.h>

#include <cstdint>

#include "format/mi_containers.h"
#include "sampler/symbols/code_unloads.h"

namespace flightrec::sampler {

class UnloadedCode {
 public:
  UnloadedCode() = default;
  ~UnloadedCode();
  UnloadedCode(const UnloadedCode&) = delete;
  UnloadedCode& operator=(const UnloadedCode&) = delete;

  // Takes in the unloads published since the last call. Returns how many;
  // *latest_ns is when the latest of them returned.
  size_t Sync(uint64_t* latest_ns);
  // The era of an event at time_ns: the first unload recorded after it.
  uint64_t EraOf(uint64_t time_ns) const;
  // Whether every unload from `era` on is known (none overwritten in the
  // ring before it was read, none dropped from the history since).
  bool Complete(uint64_t era) const;
  // The first unloaded library, from unload `era` on, that covered pc, or
  // null. *mod: its module (null if its file could not be read).
  const UnloadedObject* Holder(uint64_t era, uint64_t pc, Dwfl_Module** mod);

  static constexpr size_t kHistory = 256;  // records kept
  static constexpr size_t kOpen = 16;      // Dwfls kept open

 private:
  struct Record {
    UnloadedObject obj;
    Dwfl* dwfl = nullptr;
    Dwfl_Module* mod = nullptr;
    bool tried = false;  // Report attempted (mod null: failed)
  };
  Dwfl_Module* Open(Record* r);
  static void Close(Record* r);

  format::MiVector<Record> records_;  // unloads first_ .. next_-1, oldest first
  uint64_t first_ = 0, next_ = 0;
  uint64_t complete_from_ = 0;  // eras from here on have every record
  size_t open_ = 0;
};

}  // namespace flightrec::sampler
