// Socket address formatting (see socket_addr_format.h).
#include "preload/sockets/decode/socket_addr_format.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstdio>
#include <cstring>

namespace flightrec {

size_t FormatSockaddr(const void* addr, size_t len, char* out, size_t cap) {
  out[0] = '\0';
  if (!addr || len < sizeof(sa_family_t) || cap < 8) return 0;
  sa_family_t family;
  memcpy(&family, addr, sizeof(family));
  int n = 0;
  if ((family == AF_INET && len < sizeof(sockaddr_in)) || (family == AF_INET6 && len < sizeof(sockaddr_in6)))
    return 0;  // cut short: no address
  if (family == AF_INET) {
    sockaddr_in in;
    memcpy(&in, addr, sizeof(in));
    char ip[INET_ADDRSTRLEN];
    if (!inet_ntop(AF_INET, &in.sin_addr, ip, sizeof(ip))) return 0;
    n = snprintf(out, cap, "%s:%u", ip, ntohs(in.sin_port));
  } else if (family == AF_INET6) {
    sockaddr_in6 in6;
    memcpy(&in6, addr, sizeof(in6));
    char ip[INET6_ADDRSTRLEN];
    if (!inet_ntop(AF_INET6, &in6.sin6_addr, ip, sizeof(ip))) return 0;
    n = snprintf(out, cap, "[%s]:%u", ip, ntohs(in6.sin6_port));
  } else if (family == AF_UNIX) {
    const auto* base = static_cast<const char*>(addr);
    const size_t off = offsetof(sockaddr_un, sun_path);
    if (len <= off) return 0;  // unnamed (e.g. socketpair, unbound client)
    size_t plen = len - off;
    if (plen > sizeof(sockaddr_un::sun_path)) plen = sizeof(sockaddr_un::sun_path);
    const char* path = base + off;
    if (path[0] == '\0') {
      // Abstract name: bytes after the NUL, exactly plen - 1 of them (may hold NULs).
      size_t o = 0;
      out[o++] = '@';
      for (size_t i = 1; i < plen && o + 1 < cap; ++i) out[o++] = path[i] ? path[i] : '@';
      out[o] = '\0';
      return o;
    }
    const size_t real = strnlen(path, plen);
    n = snprintf(out, cap, "%.*s", static_cast<int>(real), path);
  } else {
    n = snprintf(out, cap, "family=%u", static_cast<unsigned>(family));
  }
  if (n < 0) {
    out[0] = '\0';
    return 0;
  }
  return static_cast<size_t>(n) < cap ? static_cast<size_t>(n) : cap - 1;
}

}  // namespace flightrec
