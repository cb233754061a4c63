// Socket address formatting for socket.open / socket.acceptq events (flush
// thread only): "127.0.0.1:8080", "[::1]:6379", "/run/app.sock",
// "@abstract-name" (Linux abstract unix names), "" for no address or an
// unnamed unix socket, "family=N" for anything else.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flightrec {

// Writes a NUL-terminated text into out (cap >= 8) and returns its length.
// `len` is the number of valid bytes at addr (a sockaddr_*), as returned by
// the kernel; anything short or malformed gives "".
size_t FormatSockaddr(const void* addr, size_t len, char* out, size_t cap);

}  // namespace flightrec
