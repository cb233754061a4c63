// CRC32C (Castagnoli, the iSCSI/ext4 CRC): checksums every segment header and
// block. Uses the SSE4.2 crc32 instruction when the CPU has it (checked once,
// format/cpu_features.h) and a slicing-by-8 table otherwise. Parameters: reflected
// polynomial 0x82F63B78, init and final XOR 0xFFFFFFFF; crc32c("123456789")
// is 0xE3069283.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flightrec::format {

// Extends `crc` (the finished CRC of the bytes so far; 0 for none) with
// `data`. Crc32c(Crc32c(0, a), b) == Crc32c(0, a ++ b).
uint32_t Crc32c(uint32_t crc, const void* data, size_t len);

// The portable table implementation, exposed so tests can compare both paths.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t len);

// True when Crc32c uses the hardware instruction.
bool Crc32cHardware();

}  // namespace flightrec::format
