// Framing limits and sizes from SPEC.md sections 3-5 that format_constants.h
// does not carry. Shared by the writer and the C++ reader.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flightrec::format {

inline constexpr size_t kHeaderFixedBytes = 48;  // magic .. anchor_realtime_ns
inline constexpr size_t kMinHeaderLen = kHeaderFixedBytes + 2 + 2 + 4;
inline constexpr size_t kMaxHeaderLen = 1u << 20;
inline constexpr size_t kBlockHeaderBytes = 20;
inline constexpr uint32_t kMaxBlockBytes = 64u << 20;  // raw_len and payload_len limit
inline constexpr uint16_t kFlagZstd = 1;               // flags bit 0
inline constexpr uint16_t kKnownFlags = kFlagZstd;
inline constexpr uint32_t kMaxEventsPerBlock = 1u << 20;  // readers reject more
inline constexpr size_t kMaxSchemaFields = 255;
// Reader limits on hostile input (SPEC.md 4.3): values an EVENTS block may
// declare (count x fields), absolutely and per payload byte; values and table
// entries (entries, stack frames, inline lines) per segment; stack depth kept.
inline constexpr uint64_t kMaxBlockCells = 1u << 22;
inline constexpr uint64_t kCellSlack = 1u << 16;
inline constexpr uint64_t kCellsPerByte = 64;
inline constexpr uint64_t kSegmentCells = 1u << 23;
inline constexpr uint64_t kCellsPerFileByte = 64;
inline constexpr uint64_t kTableBase = 1u << 21;
inline constexpr size_t kMaxStackDepth = 4096;

// Who writes a segment, in terms another process can check (SPEC.md 3,
// "writer identity"): the kernel boot, the pid namespace (the inode of
// /proc/self/ns/pid) and the process's start time (field 22 of
// /proc/self/stat, clock ticks since boot). All zero: unknown, not written.
struct WriterIdentity {
  uint8_t boot_id[16] = {};
  uint64_t pid_ns = 0;
  uint64_t start_ticks = 0;
  bool known() const { return pid_ns != 0 || start_ticks != 0; }
};
inline constexpr uint16_t kWriterIdentityBytes = 32;

}  // namespace flightrec::format
