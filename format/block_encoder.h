// BlockEncoder: frames one payload as a block (SPEC.md 4.1): 20-byte header
// with sync word, lengths, kind, flags and CRC32C, then the payload —
// zstd-compressed (level 3, one frame) when that makes it smaller.
// Owns one reusable zstd context whose memory comes from mimalloc.
#pragma once
#include <cstddef>
#include <cstdint>

#include "format/format_constants.h"
#include "format/framing.h"
#include "format/mi_containers.h"

struct ZSTD_CCtx_s;

namespace flightrec::format {

class BlockEncoder {
 public:
  BlockEncoder();
  ~BlockEncoder();
  BlockEncoder(const BlockEncoder&) = delete;
  BlockEncoder& operator=(const BlockEncoder&) = delete;

  // Appends the framed block to *out. raw_len must be <= kMaxBlockBytes
  // (callers split their payloads well below it).
  void Append(BlockKind kind, const uint8_t* raw, size_t raw_len, MiVector<uint8_t>* out);

  // Payloads shorter than this are stored uncompressed. Under 64 bytes
  // zstd's frame overhead eats any gain; up to 512 the gain is small (a
  // 2-second python3 run's trace +2.9 %, sock_echo's +1.5 %, an idle sleep's
  // +74 bytes) and a short-lived process, whose blocks are all this small,
  // then never builds zstd's context or faults in its code: /bin/true 14
  // page faults and ~0.2 ms of CPU fewer (issue #39).
  static constexpr size_t kMinCompressBytes = 512;

 private:
  bool MakeContext();  // true once cctx_ is usable

  ZSTD_CCtx_s* cctx_ = nullptr;  // made at the first compressible block; null: blocks go uncompressed
  bool context_failed_ = false;  // zstd could not allocate once: never retried
  MiVector<uint8_t> scratch_;
};

}  // namespace flightrec::format
