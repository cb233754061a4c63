// ECS/EKS container credentials endpoint: URL rules, authorization, fetch.
#include "uploader/credentials/container_credentials.h"

#include <arpa/inet.h>
#include <string.h>  // explicit_bzero

#include <cctype>

#include "uploader/s3/header_text.h"

namespace flightrec::uploader {
namespace {

constexpr const char* kEcsHost = "http://169.254.170.2";

void Wipe(std::string* s) {
  if (!s->empty()) explicit_bzero(s->data(), s->size());
  s->clear();
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The host of scheme://host[:port]/...: IPv6 literals without brackets.
bool SplitUrl(const std::string& url, std::string* scheme, std::string* host) {
  const size_t sep = url.find("://");
  if (sep == std::string::npos) return false;
  *scheme = Lower(url.substr(0, sep));
  std::string rest = url.substr(sep + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (rest.find('@') != std::string::npos) return false;  // user info: refused outright
  if (!rest.empty() && rest[0] == '[') {
    const size_t rb = rest.find(']');
    if (rb == std::string::npos) return false;
    *host = Lower(rest.substr(1, rb - 1));
  } else {
    *host = Lower(rest.substr(0, rest.find(':')));
  }
  return !host->empty();
}

bool AllowedHttpHost(const std::string& host) {
  if (host == "localhost" || host == "169.254.170.2" || host == "169.254.170.23" || host == "fd00:ec2::23") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace

bool ContainerCredentialsConfigured(const CredentialEnv& env) {
  return !env.container_relative_uri.empty() || !env.container_full_uri.empty();
}

bool ContainerCredentialsUrl(const CredentialEnv& env, std::string* url, std::string* error) {
  if (!env.container_relative_uri.empty()) {
    const std::string& rel = env.container_relative_uri;
    if (rel[0] != '/' || HasControlChar(rel)) {
      *error = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI must start with '/'";
      return false;
    }
    *url = kEcsHost + rel;
    return true;
  }
  std::string scheme, host;
  if (!SplitUrl(env.container_full_uri, &scheme, &host) || HasControlChar(env.container_full_uri)) {
    *error = "AWS_CONTAINER_CREDENTIALS_FULL_URI is not an http(s) URL";
    return false;
  }
  if (scheme == "https" || (scheme == "http" && AllowedHttpHost(host))) {
    *url = env.container_full_uri;
    return true;
  }
  *error = "AWS_CONTAINER_CREDENTIALS_FULL_URI host " + host +
           " is not allowed (https, loopback, or the ECS/EKS agent addresses only)";
  return false;
}

FetchOutcome FetchContainerCredentials(const CredentialEnv& env, HttpFetcher* http, ExpiringCredentials* out,
                                       std::string* token_seen) {
  FetchOutcome o;
  HttpRequest req;
  if (!ContainerCredentialsUrl(env, &req.url, &o.error)) return o;
  std::string token;
  if (!env.container_token_file.empty()) {
    std::string read_error;
    if (!ReadSmallFile(env.container_token_file, &token, &read_error)) {
      o.error = "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE unreadable (" + read_error + ")";
      return o;
    }
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  } else {
    token = env.container_token;
  }
  if (HasControlChar(token)) {  // it goes out as the Authorization header (header_text.h)
    Wipe(&token);
    o.error = std::string("refused: ") +
              (env.container_token_file.empty() ? "AWS_CONTAINER_AUTHORIZATION_TOKEN"
                                                : "the token in AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") +
              " holds a control character";
    return o;
  }
  *token_seen = token;
  if (!token.empty()) req.headers.push_back("Authorization: " + token);
  Wipe(&token);
  req.headers.push_back("Accept: application/json");
  req.connect_timeout_ms = 2000;
  req.timeout_ms = 5000;
  HttpResponse resp;
  const bool answered = http->Fetch(req, &resp);
  for (std::string& h : req.headers) Wipe(&h);
  if (!answered) {
    o.stopped = resp.stopped;
    o.error = "container credentials endpoint unreachable (" + resp.error + ")";
    return o;
  }
  std::string why;
  if (resp.status != 200) {
    o.error = "container credentials endpoint answered HTTP " + std::to_string(resp.status);
  } else if (!ParseCredentialDocument(resp.body, out, &why)) {
    o.error = "container credentials endpoint: " + why;
  } else {
    o.ok = true;
  }
  Wipe(&resp.body);
  return o;
}

}  // namespace flightrec::uploader
