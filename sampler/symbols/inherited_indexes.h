// Symbol indexes a forked child inherits from its parent (issue #44).
//
// A forking server (PostgreSQL, Apache prefork, gunicorn) forks workers
// whose code mappings are the parent's own. Each worker's symbolizer used to
// build its own SymbolIndex for every module it sampled (a sorted array of
// the module's symbols: ~0.3-0.5 MiB each for postgres and libc), so every
// worker carried a private copy of the same tables. Instead, the flush
// thread publishes each index it has finished building in a fixed table of
// static memory; a forked child finds the table as it was at the fork and
// uses a published index for a module with the same identity (load range,
// file inode, path) without building its own. The index's pages, and the
// libdw string tables its names point into, are the parent's, never written
// again in the child (the parent's symbolizer is abandoned there, not
// freed), so they stay shared copy-on-write: one copy for the whole tree.
//
// Safety: an entry is filled, then its index pointer published with a
// release store; it is unpublished before its index is destroyed. Only the
// symbolizer's thread (the flush thread) writes the table, so a fork at any
// instant leaves the child either a complete entry or none. Fixed size, no
// allocation; a full table publishes nothing more (the child builds its own).
#pragma once
#include <cstdint>

namespace flightrec::sampler {

class SymbolIndex;

struct ModuleIdentity {
  uint64_t low = 0, high = 0;  // the module's load range (libdw's low/high)
  uint64_t inode = 0;          // of the mapped file, from /proc/self/maps
  uint64_t name_hash = 0;      // of the path libdw was given
  bool operator==(const ModuleIdentity&) const = default;
};

ModuleIdentity MakeModuleIdentity(const char* name, uint64_t low, uint64_t high, uint64_t inode);

// Flush thread only. Publishing an index already published is a no-op.
void PublishSymbolIndex(const ModuleIdentity& id, const SymbolIndex* index);
void UnpublishSymbolIndex(const SymbolIndex* index);

// A published index for this identity (our own, or one inherited at fork),
// or null.
const SymbolIndex* FindPublishedSymbolIndex(const ModuleIdentity& id);

// How many entries are published (tests).
int PublishedSymbolIndexCount();

// Whether this process has forked while it had indexes published: its
// children may be using them, so it keeps them (and the modules their names
// point into) rather than drop them when idle (symbolizer.cc). Reset in
// each child, which has forked nothing yet. Registers its fork handlers on
// the first publish.
bool SymbolIndexesSharedWithChildren();

}  // namespace flightrec::sampler
