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

  // Payloads shorter than this are stored uncompressed: zstd's frame
  // overhead would eat any gain.
  static constexpr size_t kMinCompressBytes = 64;

 private:
  ZSTD_CCtx_s* cctx_ = nullptr;  // null if zstd could not allocate: blocks go uncompressed
  MiVector<uint8_t> scratch_;
};

}  // namespace flightrec::format
