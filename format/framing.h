// Framing limits and sizes from SPEC.md sections 3-5 that format_constants.h
// does not carry. Shared by the writer and the C++ reader.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flightrec::format {

inline constexpr size_t kHeaderFixedBytes = 48;           // magic .. anchor_realtime_ns
inline constexpr size_t kMinHeaderLen = kHeaderFixedBytes + 2 + 2 + 4;
inline constexpr size_t kMaxHeaderLen = 1u << 20;
inline constexpr size_t kBlockHeaderBytes = 20;
inline constexpr uint32_t kMaxBlockBytes = 64u << 20;     // raw_len and payload_len limit
inline constexpr uint16_t kFlagZstd = 1;                  // flags bit 0
inline constexpr uint16_t kKnownFlags = kFlagZstd;
inline constexpr uint32_t kMaxEventsPerBlock = 1u << 20;  // readers reject more
inline constexpr size_t kMaxSchemaFields = 255;

}  // namespace flightrec::format
