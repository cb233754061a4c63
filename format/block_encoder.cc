// BlockEncoder: block framing and zstd compression for the writer.
#include "format/block_encoder.h"

#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_createCCtx_advanced (custom allocator); exported by libzstd.so
#include <zstd.h>

#include "format/crc32c.h"
#include "format/varint.h"

namespace flightrec::format {
namespace {

// Level 1. Measured on a redis-benchmark trace's EVENTS payloads (176 blocks,
// 6.9 MB raw, `zstd -b`): level 3 gives 1.408 MB at 420 MB/s, level 1 1.439 MB
// (+2.2%) at 518 MB/s; on the flush thread, where redis's wake-ups have
// evicted zstd's tables between blocks, level 1 cut the whole thread's CPU by
// 13% (bench/ab: 137-147 ms -> 118-122 ms per 200k requests). Negative
// levels cost ~20% more bytes. ZSTD_compress2 with parameters set once was
// no faster than this.
constexpr int kZstdLevel = 1;
// Level 1's tables, bounded (issue #44: memory per process). Left to the
// level, zstd sizes its context for the largest block it has seen and keeps
// it: 200 KB for a redis-like process's blocks, 582 KB once a block passed
// 128 KiB, in every process (an nginx worker held 214 KB). A 4,096-entry
// hash table and a 64 KiB window (so 64 KiB zstd blocks) hold it to 85 KB
// and 288 KB: flush_socket_bench 2.13 -> 2.14 bytes per exchange,
// flush_sample_bench 5.94 -> 5.93 bytes per sample, no measurable time.
constexpr int kZstdHashLog = 12;
constexpr int kZstdWindowLog = 16;

// zstd's internal allocations go to the recorder's private heap too.
void* ZstdAlloc(void*, size_t size) { return mi_malloc(size); }
void ZstdFree(void*, void* p) { mi_free(p); }

}  // namespace

BlockEncoder::BlockEncoder() = default;

BlockEncoder::~BlockEncoder() { ZSTD_freeCCtx(cctx_); }

// zstd's context is made at the first block worth compressing, not with the
// writer: a short-lived process whose blocks all stay under
// kMinCompressBytes never pays for it (nor for faulting in zstd's code).
bool BlockEncoder::MakeContext() {
  if (cctx_ || context_failed_) return cctx_ != nullptr;
  ZSTD_customMem mem = {ZstdAlloc, ZstdFree, nullptr};
  cctx_ = ZSTD_createCCtx_advanced(mem);
  if (cctx_ && (ZSTD_isError(ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, kZstdLevel)) ||
                ZSTD_isError(ZSTD_CCtx_setParameter(cctx_, ZSTD_c_hashLog, kZstdHashLog)) ||
                ZSTD_isError(ZSTD_CCtx_setParameter(cctx_, ZSTD_c_windowLog, kZstdWindowLog)))) {
    ZSTD_freeCCtx(cctx_);
    cctx_ = nullptr;  // blocks are then written uncompressed (Append)
  }
  context_failed_ = cctx_ == nullptr;
  return cctx_ != nullptr;
}

void BlockEncoder::Append(BlockKind kind, const uint8_t* raw, size_t raw_len, MiVector<uint8_t>* out) {
  const uint8_t* payload = raw;
  size_t payload_len = raw_len;
  uint16_t flags = 0;
  if (raw_len >= kMinCompressBytes && MakeContext()) {
    scratch_.resize(ZSTD_compressBound(raw_len));
    size_t n = ZSTD_compress2(cctx_, scratch_.data(), scratch_.size(), raw, raw_len);
    if (!ZSTD_isError(n) && n < raw_len) {
      payload = scratch_.data();
      payload_len = n;
      flags = kFlagZstd;
    }
  }
  uint8_t h[kBlockHeaderBytes];
  StoreLE32(h + 0, kBlockSync);
  StoreLE32(h + 4, static_cast<uint32_t>(payload_len));
  StoreLE16(h + 8, static_cast<uint16_t>(kind));
  StoreLE16(h + 10, flags);
  StoreLE32(h + 12, static_cast<uint32_t>(raw_len));
  uint32_t crc = Crc32c(0, h + 4, 12);
  crc = Crc32c(crc, payload, payload_len);
  StoreLE32(h + 16, crc);
  out->insert(out->end(), h, h + kBlockHeaderBytes);
  out->insert(out->end(), payload, payload + payload_len);
}

}  // namespace flightrec::format
