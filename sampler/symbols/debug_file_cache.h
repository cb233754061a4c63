// Debug-file cache: inflated copies of ELF files whose DWARF sections are
// compressed, one file per build-id, shared by every process on the host.
//
// Why: libdw inflates each compressed section whole into memory it mallocs,
// and keeps it while the module is reported. Debian's, Ubuntu's and
// Fedora's debug packages compress theirs: libc6-dbg's file for libc is
// 4 MB on disk and 10 MB inflated, and every PostgreSQL backend that named
// a libc pc with its line held 2-5 MiB of it in its own heap. A copy stored
// inflated is mapped by libdw like any file instead: its pages are the page
// cache's, shared by every process that reads them, only the pages read are
// resident, and a module libdw let go of (Symbolizer::DropIdleDebugInfo)
// costs nothing to take up again.
//
// The copy keeps every byte before the first compressed section where it
// was (the ELF and program headers, the notes with the build-id) and lays
// the sections from there on out again, the compressed ones inflated (zlib,
// streamed through 64 KiB buffers: a section is never whole in memory), then
// a new section header table. It is written under a temporary name, synced
// and renamed, so a reader finds a whole copy or none; a copy is used only
// if it is a regular file of ours with the size the source's headers give,
// and libdw still checks its build-id against the module's.
//
// Flush thread (whoever symbolizes) only. Off, every file handed to libdw
// as it is, when FLIGHTREC_DEBUG_CACHE=off, under a seccomp filter
// (seccomp_state.h), when the directory cannot be
// made or is refused (preload/flush/safe_path.h), when it is on tmpfs (a copy
// there would be memory), when a copy alone would pass the directory's cap
// or leave the disk with less than its margin. Past the cap, the copies read
// least recently are deleted first (a process that maps one keeps reading
// it through its mapping).
#pragma once
#include <cstdint>
#include <string>

namespace flightrec::sampler::debugcache {

// FLIGHTREC_DEBUG_CACHE: "off", a directory (made 0700 on first use), or ""
// for DefaultDirectory() of the user the process is when it first needs a
// copy. max_bytes caps what the directory's copies take (allocated bytes;
// FLIGHTREC_DEBUG_CACHE_MAX_BYTES). Before the first symbolization (SamplerInit).
void Configure(const std::string& setting, uint64_t max_bytes);

// /var/tmp/flightrec-debug-<euid>: on disk (not /tmp, which may be tmpfs),
// kept across runs, one per user.
std::string DefaultDirectory();

// fd: an ELF file just opened for libdw (a module, or its separate debug
// file), not yet protected. Returns fd itself, or a read-only descriptor of
// the file's inflated copy (fd then closed). errno is left as it was.
int Substitute(int fd);

// Whether Substitute handed out a copy whose inode is `inode` (the first
// 64 copies): a mapping of that file is libelf's, made for libdw.
bool IsCopyHandedOut(uint64_t inode);

// The process is exiting (Symbolizer::SetExitMode): a copy already there is
// still used, but none is written (megabytes of inflating and a sync would
// only delay the exit). Any thread.
void StopMakingCopies();

struct Stats {
  uint64_t used = 0;     // descriptors handed out for a copy found in place
  uint64_t written = 0;  // copies made
  uint64_t refused = 0;  // compressed files left to libdw (no room, an error)
};
Stats GetStats();

}  // namespace flightrec::sampler::debugcache
