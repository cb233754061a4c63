// S3 endpoint, addressing-style and object-key rules.
#include "uploader/s3/s3_endpoint.h"

#include <cctype>
#include <cstdlib>

#include "uploader/s3/sigv4.h"

namespace flightrec::uploader {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Sanitize(std::string_view part) {
  std::string out(part);
  for (char& c : out)
    if (c == '/' || c == '\\') c = '_';
  return out.empty() ? std::string("unknown") : out;
}

// Parses scheme://host[:port][/path] into *out's scheme, host and base_path.
bool ParseEndpointUrl(std::string_view url, S3Endpoint* out, std::string* error) {
  size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    *error = "endpoint must start with http:// or https://";
    return false;
  }
  out->scheme = Lower(url.substr(0, sep));
  if (out->scheme != "http" && out->scheme != "https") {
    *error = "endpoint scheme must be http or https";
    return false;
  }
  std::string_view rest = url.substr(sep + 3);
  size_t path_at = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path_at);
  std::string_view path = path_at == std::string_view::npos ? std::string_view() : rest.substr(path_at);
  if (authority.find('@') != std::string_view::npos) {
    *error = "endpoint must not carry user information";  // it would be a secret in logs
    return false;
  }
  if (path.find_first_of("?#") != std::string_view::npos) {
    *error = "endpoint must not carry a query or fragment";
    return false;
  }
  std::string_view hostpart = authority, port;
  if (!authority.empty() && authority.front() == '[') {
    size_t rb = authority.find(']');
    if (rb == std::string_view::npos) {
      *error = "endpoint has an unterminated IPv6 literal";
      return false;
    }
    hostpart = authority.substr(0, rb + 1);
    if (rb + 1 < authority.size()) {
      if (authority[rb + 1] != ':') {
        *error = "endpoint has junk after the IPv6 literal";
        return false;
      }
      port = authority.substr(rb + 2);
    }
  } else {
    size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      hostpart = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
  }
  if (hostpart.empty()) {
    *error = "endpoint has no host";
    return false;
  }
  for (char c : hostpart) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == '[' || c == ']' ||
          c == ':')) {
      *error = "endpoint host has invalid characters";
      return false;
    }
  }
  std::string host = Lower(hostpart);
  if (!port.empty()) {
    unsigned long p = 0;
    for (char c : port) {
      if (!std::isdigit(static_cast<unsigned char>(c)) || p > 65535) {
        *error = "endpoint port is not a number in 1..65535";
        return false;
      }
      p = p * 10 + static_cast<unsigned long>(c - '0');
    }
    if (p == 0 || p > 65535) {
      *error = "endpoint port is not a number in 1..65535";
      return false;
    }
    const bool default_port = (out->scheme == "http" && p == 80) || (out->scheme == "https" && p == 443);
    if (!default_port) host += ":" + std::to_string(p);
  } else if (authority.back() == ':') {
    *error = "endpoint port is empty";
    return false;
  }
  out->host = host;
  std::string base(path);
  while (!base.empty() && base.back() == '/') base.pop_back();
  out->base_path = base;
  return true;
}

// Virtual-hosted addressing puts the bucket in a DNS name: it must be one label.
bool IsDnsLabelBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-'))
      return false;
  return b.front() != '-' && b.back() != '-';
}

}  // namespace

EndpointEnv EndpointEnvFrom(const char* const* envp) {
  EndpointEnv env;
  for (const char* const* p = envp; p && *p; p++) {
    std::string_view kv(*p);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "AWS_REGION") env.aws_region = v;
    else if (k == "AWS_DEFAULT_REGION") env.aws_default_region = v;
    else if (k == "AWS_ENDPOINT_URL_S3") env.aws_endpoint_url_s3 = v;
    else if (k == "AWS_ENDPOINT_URL") env.aws_endpoint_url = v;
  }
  return env;
}

bool IsValidBucketName(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' ||
          c == '.'))
      return false;
  }
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  return alnum(b.front()) && alnum(b.back()) && b.find("..") == std::string_view::npos;
}

bool ResolveS3Endpoint(const EndpointSettings& s, const EndpointEnv& env, S3Endpoint* out, std::string* error) {
  if (!IsValidBucketName(s.bucket)) {
    *error = "FLIGHTREC_S3_BUCKET '" + s.bucket + "' is not a valid bucket name";
    return false;
  }
  S3Endpoint ep;
  ep.bucket = s.bucket;
  ep.region = !s.region.empty()                 ? s.region
              : !env.aws_region.empty()         ? env.aws_region
              : !env.aws_default_region.empty() ? env.aws_default_region
                                                : std::string("us-east-1");
  for (char c : ep.region) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) {
      *error = "S3 region '" + ep.region + "' is not a region name";
      return false;
    }
  }
  const char* source = "FLIGHTREC_S3_ENDPOINT";
  std::string url = s.endpoint;
  if (url.empty()) {
    url = env.aws_endpoint_url_s3;
    source = "AWS_ENDPOINT_URL_S3";
  }
  if (url.empty()) {
    url = env.aws_endpoint_url;
    source = "AWS_ENDPOINT_URL";
  }
  ep.custom = !url.empty();
  if (!ep.custom) {
    const bool china = ep.region.rfind("cn-", 0) == 0;
    url = "https://s3." + ep.region + (china ? ".amazonaws.com.cn" : ".amazonaws.com");
  }
  std::string url_error;
  if (!ParseEndpointUrl(url, &ep, &url_error)) {
    *error = std::string(source) + ": " + url_error;
    return false;
  }
  if (s.path_style >= 0) ep.path_style = s.path_style == 1;
  else ep.path_style = ep.custom || !IsDnsLabelBucket(ep.bucket);
  if (!ep.path_style) ep.host = ep.bucket + "." + ep.host;
  *out = std::move(ep);
  return true;
}

std::string S3Endpoint::ObjectPath(std::string_view key) const {
  std::string p = base_path;
  if (path_style) p += "/" + bucket;
  p += "/";
  p.append(key);
  return p;
}

std::string S3Endpoint::BucketPath() const {
  std::string p = base_path;
  if (path_style) p += "/" + bucket;
  p += "/";
  return p;
}

std::string S3Endpoint::Url(std::string_view encoded_path_and_query) const {
  std::string u = scheme + "://" + host;
  u.append(encoded_path_and_query);
  return u;
}

std::string SegmentKey(std::string_view prefix, std::string_view service, time_t utc_seconds, std::string_view host,
                       std::string_view file_name) {
  while (!prefix.empty() && prefix.front() == '/') prefix.remove_prefix(1);
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  struct tm tm;
  gmtime_r(&utc_seconds, &tm);
  char date[16];
  strftime(date, sizeof(date), "%Y-%m-%d", &tm);
  std::string key;
  if (!prefix.empty()) key.append(prefix).push_back('/');
  key += Sanitize(service) + "/" + date + "/" + Sanitize(host) + "/" + Sanitize(file_name);
  return key;
}

std::string IncidentSegmentKey(std::string_view prefix, std::string_view service, time_t incident_utc_seconds,
                               std::string_view host, std::string_view tag, std::string_view pid,
                               std::string_view file_name) {
  std::string folder = "incident-" + Sanitize(tag) + "-" + Sanitize(pid);
  std::string key = SegmentKey(prefix, service, incident_utc_seconds, host, folder);
  return key + "/" + Sanitize(file_name);
}

}  // namespace flightrec::uploader
