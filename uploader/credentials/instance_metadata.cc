// EC2 instance metadata (IMDSv2): session token, role name, role credentials.
#include "uploader/credentials/instance_metadata.h"

#include <string.h>  // explicit_bzero, strcasecmp, strchr

#include <cctype>

#include "uploader/s3/header_text.h"

namespace flightrec::uploader {
namespace {

void Wipe(std::string* s) {
  if (!s->empty()) explicit_bzero(s->data(), s->size());
  s->clear();
}

constexpr const char* kCredentialsPath = "/latest/meta-data/iam/security-credentials/";

HttpRequest ImdsRequest(const std::string& base, const char* method, const std::string& path) {
  HttpRequest req;
  req.method = method;
  req.url = base + path;
  req.connect_timeout_ms = 1000;
  req.timeout_ms = 2000;
  req.direct = true;  // never through a proxy: the address is the instance's own
  return req;
}

// A role name as IMDS lists it: the first line, which must be a plain name.
bool RoleName(const std::string& body, std::string* role) {
  *role = body.substr(0, body.find('\n'));
  while (!role->empty() && (role->back() == '\r' || role->back() == ' ')) role->pop_back();
  if (role->empty() || role->size() > 128) return false;
  for (char c : *role)
    if (c == '\0' || !(std::isalnum(static_cast<unsigned char>(c)) || strchr("+=,.@_-", c))) return false;
  return true;
}

}  // namespace

std::string InstanceMetadataEndpoint(const CredentialEnv& env) {
  std::string url = env.ec2_metadata_endpoint;
  if (url.empty())
    url = strcasecmp(env.ec2_metadata_mode.c_str(), "IPv6") == 0 ? "http://[fd00:ec2::254]" : "http://169.254.169.254";
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

FetchOutcome FetchInstanceMetadataCredentials(const CredentialEnv& env, HttpFetcher* http, ExpiringCredentials* out,
                                              std::string* session_token_seen) {
  FetchOutcome o;
  if (env.ec2_metadata_disabled) {
    o.error = "instance metadata is disabled (AWS_EC2_METADATA_DISABLED=true)";
    return o;
  }
  const std::string base = InstanceMetadataEndpoint(env);
  HttpResponse resp;
  auto failed = [&](const char* step) {
    o.stopped = resp.stopped;
    o.error = std::string("instance metadata ") + step +
              (resp.status ? ": HTTP " + std::to_string(resp.status) : " unreachable (" + resp.error + ")");
    Wipe(&resp.body);
    return o;
  };

  HttpRequest req = ImdsRequest(base, "PUT", "/latest/api/token");
  req.headers.push_back("X-aws-ec2-metadata-token-ttl-seconds: " + std::to_string(kImdsTokenTtlSeconds));
  if (!http->Fetch(req, &resp) || resp.status != 200) return failed("session token");
  std::string token = resp.body;
  Wipe(&resp.body);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty() || HasControlChar(token)) {  // it goes out as a header (header_text.h)
    Wipe(&token);
    o.error = "refused: the instance metadata session token is empty or holds a control character";
    return o;
  }
  *session_token_seen = token;
  struct WipedString {
    std::string text;
    ~WipedString() { Wipe(&text); }
  } token_header{"X-aws-ec2-metadata-token: " + token};
  Wipe(&token);

  req = ImdsRequest(base, "GET", kCredentialsPath);
  req.headers.push_back(token_header.text);
  std::string role;
  if (!http->Fetch(req, &resp) || resp.status != 200) {
    Wipe(&req.headers.back());
    return failed(resp.status == 404 ? "role list (no instance role attached?)" : "role list");
  }
  Wipe(&req.headers.back());
  if (!RoleName(resp.body, &role)) {  // letters, digits and +=,.@_- only: never a control character
    Wipe(&resp.body);
    o.error =
        "refused: instance metadata lists no usable role name (empty, too long, or a character outside "
        "letters, digits and +=,.@_-)";
    return o;
  }
  Wipe(&resp.body);

  req = ImdsRequest(base, "GET", kCredentialsPath + role);
  req.headers.push_back(token_header.text);
  const bool answered = http->Fetch(req, &resp);
  Wipe(&req.headers.back());
  if (!answered || resp.status != 200) return failed("role credentials");
  std::string why;
  if (!ParseCredentialDocument(resp.body, out, &why)) {
    Wipe(&resp.body);
    o.error = "instance metadata: " + why;
    return o;
  }
  Wipe(&resp.body);
  o.ok = true;
  return o;
}

}  // namespace flightrec::uploader
