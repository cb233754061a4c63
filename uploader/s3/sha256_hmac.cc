// SHA-256 / HMAC-SHA256 on OpenSSL EVP (one-shot and streamed over a file range).
#include "uploader/s3/sha256_hmac.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <unistd.h>

#include "uploader/upload_libs.h"

namespace flightrec::uploader {
namespace {
// libcrypto's functions (upload_libs.h). Every caller runs after the
// uploader loaded them, or in unit tests; without them the digests are zero
// (a request signed with them fails, it never crashes).
const UploadLibs* Crypto() { return LoadUploadLibs(); }
}  // namespace

Digest Sha256(std::string_view data) {
  Digest out{};
  unsigned int len = 0;
  if (const UploadLibs* c = Crypto())
    c->evp_digest(data.data(), data.size(), out.data(), &len, c->evp_sha256(), nullptr);
  return out;
}

Digest HmacSha256(std::string_view key, std::string_view data) {
  Digest out{};
  unsigned int len = 0;
  if (const UploadLibs* c = Crypto())
    c->hmac(c->evp_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len);
  return out;
}

std::string HexLower(const uint8_t* data, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (size_t i = 0; i < n; i++) {
    s[2 * i] = kHex[data[i] >> 4];
    s[2 * i + 1] = kHex[data[i] & 15];
  }
  return s;
}

bool Sha256FileRange(int fd, uint64_t offset, uint64_t length, Digest* out, std::string* error) {
  const UploadLibs* c = Crypto();
  if (!c) {
    *error = "libcrypto unavailable";
    return false;
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(c->evp_md_ctx_new(), c->evp_md_ctx_free);
  if (!ctx || c->evp_digest_init_ex(ctx.get(), c->evp_sha256(), nullptr) != 1) {
    *error = "OpenSSL could not start a SHA-256 digest";
    return false;
  }
  constexpr size_t kChunk = 256 * 1024;
  std::unique_ptr<char[]> buf(new char[kChunk]);
  uint64_t done = 0;
  while (done < length) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, length - done));
    ssize_t got = pread(fd, buf.get(), want, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      *error = std::string("read failed: ") + strerror(errno);
      return false;
    }
    if (got == 0) {
      *error = "file is shorter than expected";
      return false;
    }
    c->evp_digest_update(ctx.get(), buf.get(), static_cast<size_t>(got));
    done += static_cast<uint64_t>(got);
  }
  unsigned int len = 0;
  c->evp_digest_final_ex(ctx.get(), out->data(), &len);
  return true;
}

}  // namespace flightrec::uploader
