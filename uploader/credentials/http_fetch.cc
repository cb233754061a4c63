// Unsigned, bounded HTTP requests for the credential providers (see http_fetch.h).
#include "uploader/credentials/http_fetch.h"

#include <curl/curl.h>
#include <string.h>  // explicit_bzero

#include <algorithm>

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
  Curl().easy_setopt(e, CURLOPT_URL, request.url.c_str());
  Curl().easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  Curl().easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  Curl().easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  Curl().easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  Curl().easy_setopt(e, CURLOPT_USERAGENT, "flightrec");
  Curl().easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, request.connect_timeout_ms);
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
  bool finished = false, stopped = false;
  for (;;) {
    if (!control_->EnterStep()) {
      dead_ = true;  // exiting: abandon the handles as they are
      response->stopped = true;
      response->error = "stopped";
      return false;
    }
    int running = 0;
    const CURLMcode mc = Curl().multi_perform(m, &running);
    if (mc == CURLM_OK && running == 0) {
      int left = 0;
      while (CURLMsg* msg = Curl().multi_info_read(m, &left))
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == e) result = msg->data.result;
      finished = true;
    } else if (mc != CURLM_OK) {
      result = CURLE_FAILED_INIT;
      finished = true;
    } else if (control_->ShouldStop()) {
      stopped = true;
    } else {
      Curl().multi_poll(m, nullptr, 0, 50, nullptr);
    }
    if (finished || stopped) {
      if (finished && result == CURLE_OK) Curl().easy_getinfo(e, CURLINFO_RESPONSE_CODE, &response->status);
      Curl().multi_remove_handle(m, e);
      Curl().slist_free_all(headers);
      control_->LeaveStep();
      break;
    }
    control_->LeaveStep();
  }
  if (stopped) {
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
