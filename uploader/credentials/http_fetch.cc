// Unsigned, bounded HTTP requests for the credential providers (see http_fetch.h).
#include "uploader/credentials/http_fetch.h"

#include <curl/curl.h>
#include <string.h>  // explicit_bzero

#include <algorithm>

#include "uploader/s3/curl_transfer.h"
#include "uploader/s3/header_text.h"
#include "uploader/upload_libs.h"

namespace flightrec::uploader {
namespace {

const UploadLibs& Curl() { return *LoadUploadLibs(); }

size_t WriteCapped(char* data, size_t size, size_t nmemb, void* userdata) {
  auto* out = static_cast<std::string*>(userdata);
  const size_t n = size * nmemb;
  if (out->size() < HttpFetcher::kMaxBody) out->append(data, std::min(n, HttpFetcher::kMaxBody - out->size()));
  return n;
}

}  // namespace

HttpFetcher::~HttpFetcher() {
  if (dead_ || (!easy_ && !multi_) || !control_->EnterStep()) return;  // exiting: leave libcurl alone
  if (multi_) Curl().multi_cleanup(static_cast<CURLM*>(multi_));
  if (easy_) Curl().easy_cleanup(static_cast<CURL*>(easy_));
  control_->LeaveStep();
}

bool HttpFetcher::Fetch(const HttpRequest& request, HttpResponse* response) {
  *response = HttpResponse();
  // A header line or URL with a control character is never sent: a CR LF
  // would add lines of its own to the request (header_text.h).
  bool clean = !HasControlChar(request.url) && !HasControlChar(request.method);
  for (const std::string& h : request.headers) clean = clean && HeaderLineClean(h);
  if (!clean) {
    response->error = "request not sent: a header or the URL holds a control character";
    return false;
  }
  if (dead_ || !S3Client::GlobalInit()) {
    response->error = "libcurl unavailable";
    return false;
  }
  if (!control_->EnterStep()) {
    dead_ = true;
    response->stopped = true;
    response->error = "stopped";
    return false;
  }
  if (!easy_) easy_ = Curl().easy_init();
  if (!multi_) multi_ = Curl().multi_init();
  if (!easy_ || !multi_) {
    control_->LeaveStep();
    response->error = "libcurl unavailable";
    return false;
  }
  CURL* e = static_cast<CURL*>(easy_);
  CURLM* m = static_cast<CURLM*>(multi_);
  Curl().easy_reset(e);
  curl_slist* headers = nullptr;
  for (const std::string& h : request.headers) headers = Curl().slist_append(headers, h.c_str());
  headers = Curl().slist_append(headers, "Expect:");
  SetCommonRequestOptions(e, request.url.c_str(), headers, request.connect_timeout_ms);
  Curl().easy_setopt(e, CURLOPT_TIMEOUT_MS, request.timeout_ms);
  if (request.direct) Curl().easy_setopt(e, CURLOPT_PROXY, "");  // "" = no proxy, whatever the environment says
  Curl().easy_setopt(e, CURLOPT_WRITEFUNCTION, WriteCapped);
  Curl().easy_setopt(e, CURLOPT_WRITEDATA, &response->body);
  if (request.method == "GET") {
    Curl().easy_setopt(e, CURLOPT_HTTPGET, 1L);
  } else {
    // PUT/POST with an in-memory body (possibly empty): POSTFIELDS sends it as is.
    Curl().easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    Curl().easy_setopt(e, CURLOPT_POSTFIELDS, request.body.c_str());
    if (request.method != "POST") Curl().easy_setopt(e, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  Curl().multi_add_handle(m, e);
  control_->LeaveStep();

  CURLcode result = CURLE_OK;
  const TransferEnd end = StepTransfer(control_, m, e, headers, /*poll_ms=*/50, &result, &response->status);
  if (end == TransferEnd::kAbandoned) dead_ = true;  // exiting: the handles stay as they are
  if (end != TransferEnd::kFinished) {
    response->stopped = true;
    response->error = "stopped";
    return false;
  }
  if (result != CURLE_OK) {
    response->error = Curl().easy_strerror(result);  // generic text: no URL, no header, no token
    response->status = 0;
    return false;
  }
  return true;
}

}  // namespace flightrec::uploader
