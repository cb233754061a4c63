// Endpoint classification (see endpoint_classify.h). Every loop is bounded by
// the input length; nothing here allocates.
#include "preload/sockets/decode/endpoint_classify.h"

#include <cstring>

namespace flightrec {

namespace {

using Bytes = const uint8_t*;

bool IsUpper(uint8_t c) { return c >= 'A' && c <= 'Z'; }
bool IsLower(uint8_t c) { return c >= 'a' && c <= 'z'; }
bool IsAlpha(uint8_t c) { return IsUpper(c) || IsLower(c); }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsPrint(uint8_t c) { return c > 0x20 && c < 0x7f; }
uint8_t Upper(uint8_t c) { return IsLower(c) ? static_cast<uint8_t>(c - 32) : c; }
uint8_t Lower(uint8_t c) { return IsUpper(c) ? static_cast<uint8_t>(c + 32) : c; }

// A bounded name being built.
struct NameOut {
  EndpointInfo* info;
  bool full = false;
  void Put(char c) {
    if (info->name_len < EndpointInfo::kMaxName) info->name[info->name_len++] = c;
    else full = true;
  }
  void Put(std::string_view s) {
    for (char c : s) Put(c);
  }
  void Done() { info->name[info->name_len] = 0; }
};

void SetName(EndpointInfo* out, std::string_view s) {
  out->name_len = 0;
  NameOut n{out};
  n.Put(s);
  n.Done();
}

// ---- HTTP/1.x ---------------------------------------------------------------

constexpr std::string_view kMethods[] = {"GET",   "POST",  "PUT",     "DELETE",   "HEAD",      "OPTIONS",
                                         "PATCH", "TRACE", "CONNECT", "PROPFIND", "PROPPATCH", "MKCOL",
                                         "COPY",  "MOVE",  "LOCK",    "UNLOCK",   "REPORT",    "PURGE"};

// The method of an HTTP/1.x request line (followed by one space), or empty.
std::string_view HttpMethod(Bytes p, size_t n) {
  if (n == 0 || p[0] < 'C' || p[0] > 'U') return {};  // every method's first letter: RESP's '*' and binary go at once
  for (std::string_view m : kMethods)
    if (n > m.size() && p[m.size()] == ' ' && memcmp(p, m.data(), m.size()) == 0) return m;
  return {};
}

bool AllOf(Bytes s, size_t n, bool (*pred)(uint8_t)) {
  for (size_t i = 0; i < n; ++i)
    if (!pred(s[i])) return false;
  return true;
}

// Does this path segment look like an identifier rather than a route word?
bool LooksLikeId(Bytes s, size_t n) {
  if (n == 0) return false;
  size_t digits = 0, alpha = 0, hex = 0, other = 0, dashes = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = s[i];
    if (!IsPrint(c) || c == '%' || c == '@') return true;  // binary, invalid UTF-8, escapes, e-mail addresses
    if (IsDigit(c)) digits++;
    else if (IsAlpha(c)) alpha++;
    else if (c == '-') dashes++;
    else other++;
    if (IsHex(c)) hex++;
  }
  if (digits == n) return true;                                            // 12345
  if (n > 32) return true;                                                 // nobody names a route like that
  if (hex == n && n >= 8 && digits) return true;                           // deadbeef01
  if (hex + dashes == n && dashes == 4 && n == 36) return true;            // a UUID
  if (digits && digits + dashes + other == n) return true;                 // 2024-01-31, 1.2.3, 10_000
  if (n >= 16 && digits && alpha && other + dashes <= n / 4) return true;  // base64-ish tokens
  if (digits * 2 > n) return true;                                         // mostly digits: v2 stays, a12345 does not
  return false;
}

// Method and normalized path of an HTTP/1.x request (p starts at the method).
void ClassifyHttp(std::string_view method, Bytes p, size_t n, EndpointInfo* out) {
  out->name_len = 0;
  NameOut name{out};
  name.Put(method);
  name.Put(' ');
  size_t i = method.size() + 1;
  // The target ends at a space, CR/LF, or the end of what we have.
  size_t end = i;
  while (end < n && p[end] != ' ' && p[end] != '\r' && p[end] != '\n') ++end;
  Bytes t = p + i;
  size_t tn = end - i;
  if (method == "CONNECT") {  // authority-form: host:port, which names a peer, not a route
    name.Put(":host");
    name.Done();
    return;
  }
  // absolute-form (proxies): drop scheme and authority.
  if (tn > 7 && (memcmp(t, "http://", 7) == 0 || (tn > 8 && memcmp(t, "https://", 8) == 0))) {
    size_t k = t[4] == 's' ? 8 : 7;
    while (k < tn && t[k] != '/' && t[k] != '?' && t[k] != '#') ++k;
    t += k;
    tn -= k;
  }
  // The query and the fragment are never read.
  for (size_t k = 0; k < tn; ++k)
    if (t[k] == '?' || t[k] == '#') {
      tn = k;
      break;
    }
  if (tn == 1 && t[0] == '*') {
    name.Put('*');
    name.Done();
    return;
  }
  if (tn == 0 || t[0] != '/') {
    name.Put(tn == 0 ? "/" : ":target");
    name.Done();
    return;
  }
  size_t segments = 0;
  size_t k = 1;
  bool any = false;
  while (k <= tn) {
    size_t e = k;
    while (e < tn && t[e] != '/') ++e;
    if (e == tn && e == k && any) {  // a trailing slash
      name.Put('/');
      break;
    }
    if (segments == kMaxPathSegments) {
      name.Put("/*");
      break;
    }
    name.Put('/');
    if (LooksLikeId(t + k, e - k)) {
      name.Put(":id");
    } else {
      for (size_t j = k; j < e; ++j) name.Put(static_cast<char>(t[j]));
    }
    any = true;
    segments++;
    k = e + 1;
  }
  if (name.full) {  // cut mid-segment: say so rather than show half a word
    out->name_len = EndpointInfo::kMaxName - 2;
    name.full = false;
    name.Put("/*");
  }
  name.Done();
}

// Case-insensitive: does line start with header name h (lowercase) and ':'?
bool HeaderIs(Bytes line, size_t n, std::string_view h) {
  if (n <= h.size() || line[h.size()] != ':') return false;
  for (size_t i = 0; i < h.size(); ++i)
    if (Lower(line[i]) != static_cast<uint8_t>(h[i])) return false;
  return true;
}

bool ParseHex(Bytes s, size_t n, uint64_t* out) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = s[i];
    if (!IsHex(c) || IsUpper(c)) return false;  // W3C: lowercase hex only
    v = v << 4 | static_cast<uint64_t>(IsDigit(c) ? c - '0' : c - 'a' + 10);
  }
  *out = v;
  return true;
}

// traceparent: version "-" trace-id(32) "-" parent-id(16) "-" flags(2).
void ParseTraceparent(Bytes v, size_t n, EndpointInfo* out) {
  if (n < 55) return;
  if (v[2] != '-' || v[35] != '-' || v[52] != '-') return;
  uint64_t version, hi, lo, span, flags;
  if (!ParseHex(v, 2, &version) || version == 0xff) return;
  if (version == 0 && n != 55) return;  // version 00 is exactly 55 characters
  if (version != 0 && n > 55 && v[55] != '-') return;
  if (!ParseHex(v + 3, 16, &hi) || !ParseHex(v + 19, 16, &lo) || !ParseHex(v + 36, 16, &span) ||
      !ParseHex(v + 53, 2, &flags))
    return;
  if ((hi | lo) == 0 || span == 0) return;  // invalid by the spec
  out->has_trace = true;
  out->trace_hi = hi;
  out->trace_lo = lo;
  out->parent_span = span;
  out->trace_flags = static_cast<uint8_t>(flags);
}

bool RequestIdChar(uint8_t c) {
  return IsAlpha(c) || IsDigit(c) || c == '-' || c == '_' || c == '.' || c == ':' || c == '+' || c == '/' || c == '=';
}

void ReadTraceHeaders(Bytes p, size_t n, EndpointInfo* out) {
  // Skip the request line, then header lines up to the blank line or the end
  // of what we have (a header cut by the prefix's end is not read).
  size_t i = 0;
  while (i < n && p[i] != '\n') ++i;
  ++i;
  while (i < n) {
    size_t e = i;
    while (e < n && p[e] != '\n') ++e;
    if (e == n) break;  // incomplete line
    size_t len = e - i;
    if (len && p[i + len - 1] == '\r') --len;
    if (len == 0) break;  // end of headers
    Bytes line = p + i;
    auto value = [&](size_t name_len, Bytes* v, size_t* vn) {
      size_t a = name_len + 1, b = len;
      while (a < b && (line[a] == ' ' || line[a] == '\t')) ++a;
      while (b > a && (line[b - 1] == ' ' || line[b - 1] == '\t')) --b;
      *v = line + a;
      *vn = b - a;
    };
    Bytes v;
    size_t vn;
    if (!out->has_trace && HeaderIs(line, len, "traceparent")) {
      value(11, &v, &vn);
      ParseTraceparent(v, vn, out);
    } else if (!out->request_id_len && HeaderIs(line, len, "x-request-id")) {
      value(12, &v, &vn);
      if (vn && vn <= EndpointInfo::kMaxRequestId && AllOf(v, vn, RequestIdChar)) {
        memcpy(out->request_id, v, vn);
        out->request_id[vn] = 0;
        out->request_id_len = vn;
      }
    }
    i = e + 1;
  }
}

// ---- Redis RESP --------------------------------------------------------------

constexpr std::string_view kRedisContainers[] = {"CONFIG",   "CLIENT",  "CLUSTER", "COMMAND", "OBJECT",
                                                 "SCRIPT",   "XINFO",   "XGROUP",  "MEMORY",  "ACL",
                                                 "FUNCTION", "SLOWLOG", "PUBSUB",  "MODULE",  "LATENCY"};

bool RedisWord(Bytes s, size_t n) {
  if (n == 0 || n > 24) return false;
  for (size_t i = 0; i < n; ++i)
    if (!IsAlpha(s[i]) && !(i && (IsDigit(s[i]) || s[i] == '_' || s[i] == '|' || s[i] == '.'))) return false;
  return true;
}

bool IsContainer(NameOut& n) {
  std::string_view name(n.info->name, n.info->name_len);
  // Length and first letter before the compare: this runs once per redis
  // question, and a library memcmp per same-length entry ("SET" vs "ACL")
  // was a tenth of the flush thread's time per exchange.
  for (std::string_view c : kRedisContainers)
    if (name.size() == c.size() && name[0] == c[0] && name == c) return true;
  return false;
}

// A decimal number terminated by CR LF at p[*i]; advances past it.
bool ReadCount(Bytes p, size_t n, size_t* i, long* out) {
  long v = 0;
  size_t k = *i, digits = 0;
  while (k < n && IsDigit(p[k]) && digits < 10) v = v * 10 + (p[k++] - '0'), digits++;
  if (!digits || k + 1 >= n || p[k] != '\r' || p[k + 1] != '\n') return false;
  *i = k + 2;
  *out = v;
  return true;
}

// "*<n>\r\n$<len>\r\n<cmd>\r\n[$<len>\r\n<sub>\r\n]"
bool ClassifyRespMultibulk(Bytes p, size_t n, EndpointInfo* out) {
  size_t i = 1;
  long count, len;
  if (!ReadCount(p, n, &i, &count) || count < 1 || count > 1 << 20) return false;
  if (i >= n || p[i] != '$') return false;
  ++i;
  if (!ReadCount(p, n, &i, &len) || len < 1 || i + static_cast<size_t>(len) > n) return false;
  if (!RedisWord(p + i, static_cast<size_t>(len))) return false;
  out->name_len = 0;
  NameOut name{out};
  for (long k = 0; k < len; ++k) name.Put(static_cast<char>(Upper(p[i + k])));
  i += static_cast<size_t>(len) + 2;
  if (count >= 2 && IsContainer(name) && i < n && p[i] == '$') {
    ++i;
    if (ReadCount(p, n, &i, &len) && len >= 1 && i + static_cast<size_t>(len) <= n &&
        RedisWord(p + i, static_cast<size_t>(len))) {
      name.Put(' ');
      for (long k = 0; k < len; ++k) name.Put(static_cast<char>(Upper(p[i + k])));
    }
  }
  name.Done();
  return true;
}

// Inline commands ("PING\r\n", "GET key\r\n"): a word, then a space or the
// line's end, and the whole line printable.
bool ClassifyRespInline(Bytes p, size_t n, EndpointInfo* out) {
  size_t w = 0;
  while (w < n && IsAlpha(p[w])) ++w;
  if (w == 0 || w > 16 || w >= n || (p[w] != ' ' && p[w] != '\r' && p[w] != '\n')) return false;
  size_t e = w;
  while (e < n && p[e] != '\n') {
    if (p[e] != '\r' && p[e] != ' ' && !IsPrint(p[e])) return false;
    ++e;
  }
  if (e == n) return false;  // no line end in sight: not sure enough
  out->name_len = 0;
  NameOut name{out};
  for (size_t k = 0; k < w; ++k) name.Put(static_cast<char>(Upper(p[k])));
  name.Done();
  return true;
}

// ---- PostgreSQL frontend -----------------------------------------------------

uint32_t Be32(Bytes p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]); }

// The first keyword of SQL text (comments and leading parentheses skipped).
void PutKeyword(NameOut& name, Bytes s, size_t n) {
  size_t i = 0;
  for (int guard = 0; guard < 8; ++guard) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n' || s[i] == '(')) ++i;
    if (i + 1 < n && s[i] == '-' && s[i + 1] == '-') {
      while (i < n && s[i] != '\n') ++i;
      continue;
    }
    if (i + 1 < n && s[i] == '/' && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) ++i;
      i += 2;
      continue;
    }
    break;
  }
  size_t w = i;
  while (w < n && IsAlpha(s[w]) && w - i < 16) ++w;
  if (w == i || (w < n && IsAlpha(s[w]))) {
    name.Put(" ?");
    return;
  }
  name.Put(' ');
  for (size_t k = i; k < w; ++k) name.Put(static_cast<char>(Upper(s[k])));
}

bool ClassifyPostgres(Bytes p, size_t n, EndpointInfo* out) {
  if (n < 5) return false;
  // Untyped first messages: length, then a code.
  if (n >= 8 && p[0] == 0) {
    const uint32_t len = Be32(p), code = Be32(p + 4);
    if (len >= 8 && len < (1u << 20)) {
      const char* what = code == 196608u     ? "Startup"
                         : code == 80877103u ? "SSLRequest"
                         : code == 80877104u ? "GSSENCRequest"
                         : code == 80877102u ? "CancelRequest"
                                             : nullptr;
      if (what) {
        SetName(out, what);
        return true;
      }
    }
    return false;
  }
  const uint32_t len = Be32(p + 1);
  if (len < 4 || len > (1u << 30)) return false;
  const char* kind = nullptr;
  switch (p[0]) {
    case 'Q': kind = "Query"; break;
    case 'P': kind = "Parse"; break;
    case 'B': kind = "Bind"; break;
    case 'E': kind = "Execute"; break;
    case 'D': kind = "Describe"; break;
    case 'S': kind = len == 4 ? "Sync" : nullptr; break;
    case 'H': kind = len == 4 ? "Flush" : nullptr; break;
    case 'X': kind = len == 4 ? "Terminate" : nullptr; break;
    case 'C': kind = "Close"; break;
    case 'F': kind = "FunctionCall"; break;
    case 'p': kind = "PasswordMessage"; break;
    case 'd': kind = "CopyData"; break;
    case 'c': kind = len == 4 ? "CopyDone" : nullptr; break;
    case 'f': kind = "CopyFail"; break;
    default: break;
  }
  if (!kind) return false;
  Bytes body = p + 5;
  size_t bn = n - 5;
  if (bn > len - 4) bn = len - 4;
  if (p[0] == 'Q' || p[0] == 'P') {
    // Query: the text. Parse: a statement name (a C string), then the text.
    if (p[0] == 'P') {
      size_t z = 0;
      while (z < bn && body[z] != 0) ++z;
      if (z == bn && bn == len - 4) return false;  // no terminator in a whole message: not Parse
      if (z + 1 > bn) {
        out->name_len = 0;
        NameOut name{out};
        name.Put(kind);
        name.Put(" ?");
        name.Done();
        return true;
      }
      body += z + 1;
      bn -= z + 1;
    }
    // Text must look like text (a keyword first): else it is not our protocol.
    out->name_len = 0;
    NameOut name{out};
    name.Put(kind);
    PutKeyword(name, body, bn);
    name.Done();
    return true;
  }
  SetName(out, kind);
  return true;
}

}  // namespace

void ClassifyQuestion(const uint8_t* p, size_t n, unsigned mask, bool trace_context, EndpointInfo* out) {
  out->name_len = 0;
  out->has_trace = false;
  out->trace_hi = out->trace_lo = out->parent_span = 0;
  out->trace_flags = 0;
  out->request_id_len = 0;
  if (!p || n == 0) {
    SetName(out, "other");
    return;
  }
  // TLS: a handshake record (ClientHello) of TLS 1.0-1.3 or SSL 3.
  if (n >= 3 && p[0] == 0x16 && p[1] == 0x03 && p[2] <= 0x04) {
    SetName(out, "tls");
    return;
  }
  static constexpr char kH2Preface[] = "PRI * HTTP/2.0\r\n";
  if (p[0] == 'P' && n >= sizeof(kH2Preface) - 1 && memcmp(p, kH2Preface, sizeof(kH2Preface) - 1) == 0) {
    SetName(out, "h2");
    return;
  }
  if (mask & kClassifyHttp) {
    const std::string_view m = HttpMethod(p, n);
    if (!m.empty()) {
      ClassifyHttp(m, p, n, out);
      if (trace_context) ReadTraceHeaders(p, n, out);
      return;
    }
  }
  if ((mask & kClassifyRedis) && p[0] == '*' && ClassifyRespMultibulk(p, n, out)) return;
  if ((mask & kClassifyPostgres) && ClassifyPostgres(p, n, out)) return;
  if ((mask & kClassifyRedis) && ClassifyRespInline(p, n, out)) return;
  SetName(out, "other");
}

bool ParseEndpointClassifiers(std::string_view text, unsigned* mask) {
  if (text == "1" || text == "on" || text == "true" || text == "yes" || text == "all") {
    *mask = kClassifyAll;
    return true;
  }
  if (text == "0" || text == "off" || text == "false" || text == "no") {
    *mask = 0;
    return true;
  }
  unsigned m = 0;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == "http") m |= kClassifyHttp;
    else if (item == "redis") m |= kClassifyRedis;
    else if (item == "postgres" || item == "pg" || item == "postgresql") m |= kClassifyPostgres;
    else return false;
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (!m) return false;
  *mask = m;
  return true;
}

}  // namespace flightrec
