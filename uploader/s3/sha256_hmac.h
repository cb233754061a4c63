// SHA-256 and HMAC-SHA256 for SigV4, on OpenSSL's EVP interface.
//
// Everything here is pure and thread-safe; callers run on the upload thread
// or in unit tests, never on hot paths (OpenSSL allocates).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flightrec::uploader {

using Digest = std::array<uint8_t, 32>;

Digest Sha256(std::string_view data);
Digest HmacSha256(std::string_view key, std::string_view data);
std::string HexLower(const uint8_t* data, size_t n);
inline std::string HexLower(const Digest& d) { return HexLower(d.data(), d.size()); }
inline std::string Sha256Hex(std::string_view data) { return HexLower(Sha256(data)); }
inline std::string_view AsView(const Digest& d) {
  return std::string_view(reinterpret_cast<const char*>(d.data()), d.size());
}

// SHA-256 of `length` bytes of `fd` starting at `offset`, read with pread so
// the descriptor's file position is untouched. Returns false (and sets *error
// to the errno text) on a read error or if the file is shorter than asked.
bool Sha256FileRange(int fd, uint64_t offset, uint64_t length, Digest* out, std::string* error);

// The hex SHA-256 of the empty string, S3's x-amz-content-sha256 for bodiless requests.
inline constexpr const char* kEmptySha256Hex = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

}  // namespace flightrec::uploader
