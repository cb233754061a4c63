// AWS Signature Version 4: canonical request, string to sign, signing key,
// Authorization header, and query-string presigning.
//
// Pure functions of their inputs (no clock, no environment), so the unit
// tests can replay the published known-answer vectors byte for byte.
//
// Paths: callers pass the raw (decoded) path; each '/'-separated segment is
// URI-encoded exactly once, which is both the S3 wire form and its canonical
// form. S3 paths are never normalized: `normalize_path` exists only so the
// generic (non-S3) vectors can be replayed, and the S3 client never sets it.
//
// Secrets: the secret key only ever enters SigningKey(); nothing here puts it
// (or the session token, except as the x-amz-security-token header the
// caller asked for) into any returned string meant for logs.
#pragma once
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "uploader/s3/sha256_hmac.h"

namespace flightrec::uploader {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty when not using temporary credentials
  bool valid() const { return !access_key_id.empty() && !secret_access_key.empty(); }
  void Clear();  // overwrites the secrets before releasing them
};

using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct SigV4Request {
  std::string method;  // "GET", "PUT", ...
  std::string path;    // raw path, starts with '/', not yet percent-encoded
  KeyValues query;     // raw (decoded) keys and values; "" value for ?uploads
  KeyValues headers;   // name/value as sent; names are case-insensitive
};

struct SigV4Params {
  std::string amz_date;         // "20150830T123600Z"
  std::string region;           // "us-east-1"
  std::string service;          // "s3"
  bool normalize_path = false;  // never for S3; see the file comment
};

struct SigV4Result {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;x-amz-content-sha256;x-amz-date"
  std::string signature;       // lowercase hex
  std::string authorization;   // the Authorization header value (header signing)
  std::string signed_query;    // encoded, '&'-joined query incl. X-Amz-Signature (presigning)
};

// RFC 3986 unreserved characters (A-Z a-z 0-9 - _ . ~) pass through; every
// other byte becomes %XX with uppercase hex. '/' is kept when keep_slash.
enum class Slash : bool { kEncode = false, kKeep = true };
std::string UriEncode(std::string_view in, Slash slash);
// Decodes %XX escapes (invalid escapes are kept literally); '+' stays '+'.
std::string UriDecode(std::string_view in);

// "/a b/c" -> "/a%20b/c"; with normalize, dot segments and empty segments are
// removed first (RFC 3986 5.2.4), as non-S3 services do.
std::string CanonicalUri(std::string_view raw_path, bool normalize);
// Encodes keys and values, sorts by encoded key then value, joins "k=v" with '&'.
std::string CanonicalQuery(const KeyValues& query);
// Lowercased names sorted; values trimmed with inner runs of spaces collapsed;
// repeated names joined with ','. Returns "name:value\n"* and sets *signed_names.
std::string CanonicalHeaders(const KeyValues& headers, std::string* signed_names);

std::string CanonicalRequest(const SigV4Request& request, std::string_view payload_hash, bool normalize_path,
                             std::string* signed_headers);
std::string CredentialScope(std::string_view amz_date, std::string_view region, std::string_view service);
std::string StringToSign(std::string_view amz_date, std::string_view scope, std::string_view canonical_request);
Digest SigningKey(std::string_view secret, std::string_view date8, std::string_view region, std::string_view service);
std::string SignatureHex(const Digest& signing_key, std::string_view string_to_sign);

// Signs with headers: the caller has already put every header to sign into
// request.headers (host, x-amz-date, x-amz-content-sha256, and
// x-amz-security-token when a session token is used).
SigV4Result SignHeaders(const SigV4Request& request, std::string_view payload_hash, const Credentials& credentials,
                        const SigV4Params& params);

// Presigns with the query string: adds X-Amz-Algorithm, -Credential, -Date,
// -Expires, -SignedHeaders (and -Security-Token when include_token and the
// credentials carry one) to the query, signs, and returns the full encoded
// query in signed_query.
SigV4Result PresignQuery(const SigV4Request& request, std::string_view payload_hash, const Credentials& credentials,
                         const SigV4Params& params, uint64_t expires_seconds, bool include_token);

// "YYYYMMDDTHHMMSSZ" for a UTC time.
std::string AmzDate(time_t utc_seconds);

}  // namespace flightrec::uploader
