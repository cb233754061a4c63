// STS AssumeRoleWithWebIdentity: request, response, the token file.
#include "uploader/credentials/web_identity.h"

#include <string.h>  // explicit_bzero
#include <time.h>
#include <unistd.h>

#include "uploader/retry_policy.h"
#include "uploader/s3/error_text.h"
#include "uploader/s3/header_text.h"
#include "uploader/s3/s3_xml.h"
#include "uploader/s3/sigv4.h"

namespace flightrec::uploader {
namespace {

void Wipe(std::string* s) {
  if (!s->empty()) explicit_bzero(s->data(), s->size());
  s->clear();
}

std::string Trimmed(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return std::string(s);
}

// STS allows [\w+=,.@-]{2,64}; the SDKs default to a timestamped name.
std::string SessionName(const CredentialEnv& env) {
  if (!env.role_session_name.empty()) return env.role_session_name;
  return "flightrec-" + std::to_string(static_cast<long long>(time(nullptr))) + "-" +
         std::to_string(static_cast<long>(getpid()));
}

}  // namespace

bool WebIdentityConfigured(const CredentialEnv& env) {
  return !env.web_identity_token_file.empty() && !env.role_arn.empty();
}

std::string StsEndpointUrl(const CredentialEnv& env, std::string_view region) {
  std::string url = env.sts_endpoint;
  if (url.empty()) {
    const std::string r = region.empty() ? std::string("us-east-1") : std::string(region);
    const bool china = r.rfind("cn-", 0) == 0;
    url = "https://sts." + r + (china ? ".amazonaws.com.cn" : ".amazonaws.com");
  }
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

std::string AssumeRoleWithWebIdentityBody(std::string_view role_arn, std::string_view session_name,
                                          std::string_view token) {
  return "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + UriEncode(role_arn, Slash::kEncode) +
         "&RoleSessionName=" + UriEncode(session_name, Slash::kEncode) +
         "&WebIdentityToken=" + UriEncode(token, Slash::kEncode);
}

bool ParseAssumeRoleWithWebIdentityResponse(std::string_view xml, ExpiringCredentials* out, std::string* error) {
  std::string code;
  if (xml.find("<ErrorResponse") != std::string_view::npos || xml.find("<Error>") != std::string_view::npos) {
    std::string message;
    XmlElementText(xml, "Code", &code);
    XmlElementText(xml, "Message", &message);
    *error = "STS " + Shorten(code.empty() ? std::string("error") : code, 64) +
             (message.empty() ? std::string() : " - " + Shorten(message));
    Wipe(&message);
    return false;
  }
  std::string credentials_xml;
  ExpiringCredentials c;
  std::string expiration;
  // The <Credentials> element alone: its members have names other elements share.
  const size_t open = xml.find("<Credentials>");
  const size_t close = xml.find("</Credentials>");
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    *error = "STS answered without <Credentials>";
    return false;
  }
  const std::string_view inner = xml.substr(open, close - open);
  const bool ok = XmlElementText(inner, "AccessKeyId", &c.credentials.access_key_id) &&
                  XmlElementText(inner, "SecretAccessKey", &c.credentials.secret_access_key) &&
                  XmlElementText(inner, "SessionToken", &c.credentials.session_token) &&
                  XmlElementText(inner, "Expiration", &expiration);
  if (!ok || !c.credentials.valid() || c.credentials.session_token.empty()) {
    c.Clear();
    *error = "STS <Credentials> lacks AccessKeyId, SecretAccessKey, SessionToken or Expiration";
    return false;
  }
  // XML entities decode to any character: a &#13;&#10; in a token would
  // become an extra header line to S3 (header_text.h).
  const char* bad = CredentialFieldWithControlChar(c.credentials);
  if (bad || HasControlChar(expiration)) {
    c.Clear();
    *error = std::string("refused: STS <Credentials> ") + (bad ? bad : "Expiration") + " holds a control character";
    return false;
  }
  if (!ParseHttpDate(expiration, &c.expires_at)) {
    c.Clear();
    *error = "STS <Expiration> is not an ISO 8601 time";
    return false;
  }
  *out = std::move(c);
  return true;
}

FetchOutcome FetchWebIdentityCredentials(const CredentialEnv& env, std::string_view region, HttpFetcher* http,
                                         ExpiringCredentials* out, std::string* token_seen) {
  FetchOutcome o;
  std::string raw, read_error;
  if (!ReadSmallFile(env.web_identity_token_file, &raw, &read_error)) {
    o.error = "AWS_WEB_IDENTITY_TOKEN_FILE unreadable (" + read_error + ")";
    return o;
  }
  std::string token = Trimmed(raw);
  Wipe(&raw);
  if (token.empty()) {
    o.error = "AWS_WEB_IDENTITY_TOKEN_FILE " + env.web_identity_token_file + " is empty";
    return o;
  }
  *token_seen = token;
  HttpRequest req;
  req.method = "POST";
  req.url = StsEndpointUrl(env, region) + "/";
  req.headers = {"Content-Type: application/x-www-form-urlencoded; charset=utf-8", "Accept: application/xml"};
  req.body = AssumeRoleWithWebIdentityBody(env.role_arn, SessionName(env), token);
  Wipe(&token);
  req.connect_timeout_ms = 3000;
  req.timeout_ms = 10000;
  req.direct = false;  // STS is an ordinary AWS endpoint: a configured proxy applies, as in the SDKs
  HttpResponse resp;
  const bool answered = http->Fetch(req, &resp);
  Wipe(&req.body);
  // An error that echoes the token loses it here, before any text is shortened
  // (a cut token would slip past the caller's exact-match scrubbing).
  for (size_t at; !token_seen->empty() && (at = resp.body.find(*token_seen)) != std::string::npos;)
    resp.body.replace(at, token_seen->size(), "[redacted]");
  if (!answered) {
    o.stopped = resp.stopped;
    o.error = "STS unreachable (" + resp.error + ")";
    return o;
  }
  std::string why;
  if (!ParseAssumeRoleWithWebIdentityResponse(resp.body, out, &why)) {
    o.error = "HTTP " + std::to_string(resp.status) + " " + why;
  } else if (resp.status != 200) {
    out->Clear();
    o.error = "HTTP " + std::to_string(resp.status) + " from STS";
  } else {
    o.ok = true;
  }
  Wipe(&resp.body);
  return o;
}

}  // namespace flightrec::uploader
