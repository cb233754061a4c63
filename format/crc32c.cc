// CRC32C: hardware (SSE4.2) and portable slicing-by-8 implementations.
#include "format/crc32c.h"

#include <atomic>
#include <cstring>

#include "format/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define CRC32C_HAVE_X86 1
#endif

namespace flightrec::format {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

struct Tables {
  uint32_t t[8][256];
  constexpr Tables() : t() {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
      t[0][i] = c;
    }
    for (int s = 1; s < 8; s++)
      for (uint32_t i = 0; i < 256; i++) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};
constexpr Tables kTables;

// `state` is the raw register (already inverted), as in both loops below.
uint32_t PortableRaw(uint32_t state, const uint8_t* p, size_t len) {
  const auto& t = kTables.t;
  while (len >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian hosts only (x86-64, aarch64 LE)
    w ^= state;
    state = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
            t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    p += 8;
    len -= 8;
  }
  while (len--) state = t[0][(state ^ *p++) & 0xff] ^ (state >> 8);
  return state;
}

#ifdef CRC32C_HAVE_X86
// target attribute instead of a global -msse4.2: the library must still run
// on CPUs without the instruction (the SSE4.2 bit picks the path).
__attribute__((target("sse4.2"))) uint32_t HardwareRaw(uint32_t state, const uint8_t* p, size_t len) {
  uint64_t s = state;
  while (len >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    s = _mm_crc32_u64(s, w);
    p += 8;
    len -= 8;
  }
  uint32_t s32 = static_cast<uint32_t>(s);
  while (len--) s32 = _mm_crc32_u8(s32, *p++);
  return s32;
}

// format/cpu_features.h: glibc's copy of the bits, not a CPUID per process.
bool DetectHardware() { return cpu::HasSse42(); }
#endif

// 0 = unknown, 1 = portable, 2 = hardware. Racing first calls compute the
// same answer, so a relaxed store is enough.
std::atomic<int> g_impl{0};

int Impl() {
  int v = g_impl.load(std::memory_order_relaxed);
  if (v == 0) {
#ifdef CRC32C_HAVE_X86
    v = DetectHardware() ? 2 : 1;
#else
    v = 1;
#endif
    g_impl.store(v, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t len) {
  return ~PortableRaw(~crc, static_cast<const uint8_t*>(data), len);
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t len) {
#ifdef CRC32C_HAVE_X86
  if (Impl() == 2) return ~HardwareRaw(~crc, static_cast<const uint8_t*>(data), len);
#endif
  return Crc32cPortable(crc, data, len);
}

bool Crc32cHardware() { return Impl() == 2; }

}  // namespace flightrec::format
