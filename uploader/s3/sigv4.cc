// AWS SigV4 signing (header and query forms), per the AWS "Create a signed
// request" rules; S3 paths are encoded once and never normalized.
#include "uploader/s3/sigv4.h"

#include <string.h>  // explicit_bzero

#include <algorithm>
#include <cctype>

namespace flightrec::uploader {
namespace {

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Trimall: strip both ends, turn each inner whitespace run into one space.
std::string TrimAll(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  bool pending_space = false;
  for (char c : v) {
    if (IsSpace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// RFC 3986 remove_dot_segments plus collapsing empty segments, as the non-S3
// AWS services do. The result always starts with '/'.
std::string NormalizePath(std::string_view path) {
  std::vector<std::string_view> stack;
  size_t i = 0;
  std::string_view last;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view seg = path.substr(i, j - i);
    last = seg;
    if (seg == "..") {
      if (!stack.empty()) stack.pop_back();
    } else if (!seg.empty() && seg != ".") {
      stack.push_back(seg);
    }
    i = j + 1;
  }
  const bool trailing = !path.empty() && (path.back() == '/' || last == "." || last == "..");
  std::string out = "/";
  for (size_t k = 0; k < stack.size(); k++) {
    if (k) out.push_back('/');
    out.append(stack[k]);
  }
  if (trailing && !stack.empty()) out.push_back('/');
  return out;
}

}  // namespace

void Credentials::Clear() {
  // explicit_bzero cannot be optimized away, unlike a plain memset (and
  // needs no libcrypto: credentials exist before it is loaded).
  if (!secret_access_key.empty()) explicit_bzero(secret_access_key.data(), secret_access_key.size());
  if (!session_token.empty()) explicit_bzero(session_token.data(), session_token.size());
  access_key_id.clear();
  secret_access_key.clear();
  session_token.clear();
}

std::string UriEncode(std::string_view in, Slash slash) {
  const bool keep_slash = slash == Slash::kKeep;
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size() * 3);
  for (char ch : in) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string UriDecode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); i++) {
    if (in[i] == '%' && i + 2 < in.size()) {
      int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(in[i]);
  }
  return out;
}

std::string CanonicalUri(std::string_view raw_path, bool normalize) {
  if (raw_path.empty()) return "/";
  if (normalize) return UriEncode(NormalizePath(raw_path), Slash::kKeep);
  return UriEncode(raw_path, Slash::kKeep);
}

std::string CanonicalQuery(const KeyValues& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, Slash::kEncode), UriEncode(v, Slash::kEncode));
  std::sort(enc.begin(), enc.end());  // by encoded key, then encoded value
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out.push_back('&');
    out.append(k).push_back('=');
    out.append(v);
  }
  return out;
}

std::string CanonicalHeaders(const KeyValues& headers, std::string* signed_names) {
  std::vector<std::pair<std::string, std::string>> lowered;
  lowered.reserve(headers.size());
  for (const auto& [n, v] : headers) lowered.emplace_back(Lower(TrimAll(n)), TrimAll(v));
  // Stable: repeated names keep their order of appearance when joined.
  std::stable_sort(lowered.begin(), lowered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  signed_names->clear();
  for (size_t i = 0; i < lowered.size();) {
    size_t j = i;
    std::string value;
    for (; j < lowered.size() && lowered[j].first == lowered[i].first; j++) {
      if (j > i) value.push_back(',');
      value.append(lowered[j].second);
    }
    out.append(lowered[i].first).append(":").append(value).push_back('\n');
    if (!signed_names->empty()) signed_names->push_back(';');
    signed_names->append(lowered[i].first);
    i = j;
  }
  return out;
}

std::string CanonicalRequest(const SigV4Request& request, std::string_view payload_hash, bool normalize_path,
                             std::string* signed_headers) {
  std::string out = request.method;
  out.push_back('\n');
  out.append(CanonicalUri(request.path, normalize_path)).push_back('\n');
  out.append(CanonicalQuery(request.query)).push_back('\n');
  out.append(CanonicalHeaders(request.headers, signed_headers)).push_back('\n');
  out.append(*signed_headers).push_back('\n');
  out.append(payload_hash);
  return out;
}

std::string CredentialScope(std::string_view amz_date, std::string_view region, std::string_view service) {
  std::string out(amz_date.substr(0, 8));
  out.append("/").append(region).append("/").append(service).append("/aws4_request");
  return out;
}

std::string StringToSign(std::string_view amz_date, std::string_view scope, std::string_view canonical_request) {
  std::string out = "AWS4-HMAC-SHA256\n";
  out.append(amz_date).push_back('\n');
  out.append(scope).push_back('\n');
  out.append(Sha256Hex(canonical_request));
  return out;
}

Digest SigningKey(std::string_view secret, std::string_view date8, std::string_view region, std::string_view service) {
  std::string k_secret = "AWS4";
  k_secret.append(secret);
  Digest k_date = HmacSha256(k_secret, date8);
  explicit_bzero(k_secret.data(), k_secret.size());
  Digest k_region = HmacSha256(AsView(k_date), region);
  Digest k_service = HmacSha256(AsView(k_region), service);
  return HmacSha256(AsView(k_service), "aws4_request");
}

std::string SignatureHex(const Digest& signing_key, std::string_view string_to_sign) {
  return HexLower(HmacSha256(AsView(signing_key), string_to_sign));
}

SigV4Result SignHeaders(const SigV4Request& request, std::string_view payload_hash, const Credentials& credentials,
                        const SigV4Params& params) {
  SigV4Result r;
  r.canonical_request = CanonicalRequest(request, payload_hash, params.normalize_path, &r.signed_headers);
  const std::string scope = CredentialScope(params.amz_date, params.region, params.service);
  r.string_to_sign = StringToSign(params.amz_date, scope, r.canonical_request);
  Digest key = SigningKey(credentials.secret_access_key, params.amz_date.substr(0, 8), params.region, params.service);
  r.signature = SignatureHex(key, r.string_to_sign);
  explicit_bzero(key.data(), key.size());
  r.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                    ", SignedHeaders=" + r.signed_headers + ", Signature=" + r.signature;
  return r;
}

SigV4Result PresignQuery(const SigV4Request& request, std::string_view payload_hash, const Credentials& credentials,
                         const SigV4Params& params, uint64_t expires_seconds, bool include_token) {
  SigV4Request req = request;
  std::string signed_names;
  CanonicalHeaders(req.headers, &signed_names);
  const std::string scope = CredentialScope(params.amz_date, params.region, params.service);
  req.query.emplace_back("X-Amz-Algorithm", "AWS4-HMAC-SHA256");
  req.query.emplace_back("X-Amz-Credential", credentials.access_key_id + "/" + scope);
  req.query.emplace_back("X-Amz-Date", params.amz_date);
  req.query.emplace_back("X-Amz-Expires", std::to_string(expires_seconds));
  if (include_token && !credentials.session_token.empty())
    req.query.emplace_back("X-Amz-Security-Token", credentials.session_token);
  req.query.emplace_back("X-Amz-SignedHeaders", signed_names);

  SigV4Result r;
  r.canonical_request = CanonicalRequest(req, payload_hash, params.normalize_path, &r.signed_headers);
  r.string_to_sign = StringToSign(params.amz_date, scope, r.canonical_request);
  Digest key = SigningKey(credentials.secret_access_key, params.amz_date.substr(0, 8), params.region, params.service);
  r.signature = SignatureHex(key, r.string_to_sign);
  explicit_bzero(key.data(), key.size());
  r.signed_query = CanonicalQuery(req.query) + "&X-Amz-Signature=" + r.signature;
  return r;
}

std::string AmzDate(time_t utc_seconds) {
  struct tm tm;
  gmtime_r(&utc_seconds, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

}  // namespace flightrec::uploader
