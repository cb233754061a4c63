// Symbolizer: turns pcs of our own process into mappings (path, offset,
// build-id) and inline chains of (function, file, line) with libdw.
//
// Implements format::PcDescriber for the segment writer. Runs on the flush
// thread only (not thread-safe): libdw, demangling and /proc reads allocate
// and take time, which is fine there and never on an application thread.
//
// Caching: one compact entry per pc (pc_cache.h), kept until the table
// reaches its bound (then dropped wholesale). A pc in no known module is
// retried after the process's code mappings change (dlopen/dlclose), which
// is checked at most every kRescanIntervalNs when unknown pcs keep arriving.
//
// Unloads (code_unloads.h, unloaded_code.h): after the host dlclosed a
// library, the next WorldStart() or Generation() call re-reads the maps and
// re-reports the modules at once and drops every cached answer (an address
// may now hold other code). Events from before the unload are described as
// of their own time (DescribeBefore).
#pragma once
#include <cstdint>
#include <vector>

#include "format/segment_writer.h"

namespace flightrec::sampler {

class Symbolizer final : public format::PcDescriber {
 public:
  Symbolizer();
  ~Symbolizer() override;
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  bool Describe(uint64_t pc, format::MappingInfo* mapping, std::vector<format::FrameLine>* lines) override;
  // The maps generation: moves when the code mappings change or file
  // descriptors came back after fd exhaustion (probed here while starved:
  // one failed open() per call), so pcs described unnamed are asked again.
  uint64_t Generation() override;
  // When the latest unload seen returned (0: none yet).
  uint64_t WorldStart() override;
  // For an event older than WorldStart(): the era it falls in
  // (unloaded_code.h), and pc as it was then. A pc that a library unloaded
  // since covered is named from that library's file; otherwise it is
  // described as now if that is certain, else left unknown.
  uint64_t EraBefore(uint64_t time_ns) override;
  bool DescribeBefore(uint64_t pc, uint64_t era, format::MappingInfo* mapping,
                      std::vector<format::FrameLine>* lines) override;

  // Exit mode: from now on, modules whose DWARF is not loaded yet are
  // described from their symbol tables only (no file:line), unless their
  // debug info is uncompressed and small (a few MB: cheap to read). Loading
  // DWARF can take 100+ ms per module (decompressing separate debug files),
  // which an exiting process must not spend. Callable from any thread.
  void SetExitMode(bool on);

  // Frees the debug information of modules that have described no new pc
  // for kDwarfIdleNs (doubling with each drop of the same module), and
  // reports them afresh: a new pc there loads it again. Memory, not truth:
  // described pcs stay cached. Checked at most every kIdleCheckNs. Also
  // lets go of the pages libdw read of the files it keeps mapped, at most
  // every 5 s after it resolved a pc (source_pages.h). The symbolizer's
  // thread only, between descriptions.
  void DropIdleDebugInfo(uint64_t now_ns);
  static constexpr uint64_t kDwarfIdleNs = 2'000'000'000;  // 2 s, then 4, 8, ... 64 s
  static constexpr uint32_t kMaxIdleDoublings = 5;
  static constexpr uint64_t kIdleCheckNs = 1'000'000'000;

  struct Stats {
    uint64_t lookups = 0, cache_hits = 0, unknown = 0, rescans = 0, reports = 0, dwarf_skipped = 0;
    uint64_t symbol_tables = 0;            // SymbolIndex builds (one per module per report)
    uint64_t symbol_tables_inherited = 0;  // indexes a forked child used from its parent (inherited_indexes.h)
    uint64_t debug_fds_released = 0;       // separate debug files whose descriptor was closed early
    uint64_t unload_syncs = 0;             // re-reads after a dlclose
    uint64_t dwarf_dropped = 0;            // modules whose idle DWARF was freed (DropIdleDebugInfo)
    uint64_t source_bytes_released = 0;    // pages of libdw's file mappings let go (source_pages.h)
    // pcs of events older than an unload; named from an unloaded library; left unknown
    uint64_t described_before = 0, unloaded_named = 0, unknown_before = 0;
  };
  Stats stats() const;

  static constexpr uint64_t kRescanIntervalNs = 100'000'000;  // 100 ms

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace flightrec::sampler
