// HttpFetcher: the small unsigned HTTP client the credential providers use
// (instance metadata, container credentials, STS), on its own libcurl
// handles, on the upload thread only.
//
// Like S3Client, every libcurl call sits inside S3Control::EnterStep()/
// LeaveStep() and a transfer is stepped through a private multi handle, so
// the shutdown deadline stops it within ~poll_ms and an exiting process is
// never inside libcurl. Each request also has its own hard bounds (connect
// and total timeouts): a metadata endpoint that does not exist costs at most
// those, never the host anything.
//
// Responses are capped (credential documents are small); redirects are
// never followed; the environment's proxies are bypassed when asked (link-
// local and loopback endpoints must be reached directly, as the SDKs do).
#pragma once
#include <string>
#include <vector>

#include "uploader/s3/s3_client.h"

namespace flightrec::uploader {

struct HttpRequest {
  std::string method = "GET";  // GET, PUT or POST
  std::string url;
  std::vector<std::string> headers;  // "Name: value"; may hold a token (never logged)
  std::string body;                  // PUT/POST body
  long connect_timeout_ms = 1000;
  long timeout_ms = 2000;  // the whole exchange
  bool direct = true;      // bypass http(s)_proxy
};

struct HttpResponse {
  long status = 0;       // 0: no HTTP answer (see error)
  std::string body;      // at most kMaxBody bytes
  std::string error;     // libcurl's generic text for a transport failure, "" otherwise
  bool stopped = false;  // the owner's ShouldStop() ended it
};

class HttpFetcher {
 public:
  static constexpr size_t kMaxBody = 64 * 1024;

  explicit HttpFetcher(S3Control* control) : control_(control) {}
  ~HttpFetcher();
  HttpFetcher(const HttpFetcher&) = delete;
  HttpFetcher& operator=(const HttpFetcher&) = delete;

  // false when no HTTP answer came (transport error, stop, libcurl missing).
  bool Fetch(const HttpRequest& request, HttpResponse* response);

 private:
  S3Control* control_;
  void* easy_ = nullptr;   // CURL*
  void* multi_ = nullptr;  // CURLM*
  bool dead_ = false;      // EnterStep() refused once: never touch libcurl again
};

}  // namespace flightrec::uploader
