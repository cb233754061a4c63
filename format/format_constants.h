// Constants of the segment format shared by the writer, the reader and (in
// prose) format/SPEC.md and scripts/flightrec-dump. Changing a value here is a
// format change: bump kFramingVersion and update SPEC.md.
#pragma once
#include <cstdint>

namespace flightrec::format {

inline constexpr char kSegmentMagic[8] = {'F', 'L', 'T', 'R', 'E', 'C', 'S', 'G'};
inline constexpr uint16_t kFramingVersion = 1;
inline constexpr uint32_t kBlockSync = 0x4B4C4246;  // "FBLK" little-endian

// Block kinds. A reader skips kinds it does not know.
enum class BlockKind : uint16_t {
  kSchema = 1,     // event type definitions
  kStrings = 2,    // string intern table
  kMappings = 3,   // memory mappings (path, build-id)
  kLocations = 4,  // code locations: pc -> mapping + (function, file, line)* inline chain
  kStacks = 5,     // stacks: list of location ids, leaf first
  kEvents = 6,     // one event type, columnar
  kFooter = 7,     // sealed-segment summary
};

// Field type codes used in SCHEMA blocks. The reader knows only these.
enum class FieldType : uint8_t {
  kTime = 1,    // CLOCK_MONOTONIC nanoseconds, unsigned
  kUInt = 2,    // unsigned 64-bit integer
  kSInt = 3,    // signed 64-bit integer
  kString = 4,  // id into the STRINGS table (0 = empty / none)
  kStack = 5,   // id into the STACKS table (0 = no stack)
  kF64 = 6,     // IEEE-754 double
  kBytes = 7,   // opaque byte string
};

}  // namespace flightrec::format
