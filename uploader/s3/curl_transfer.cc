// One libcurl request of ours: common options and the stepped transfer loop
// (see curl_transfer.h).
#include "uploader/s3/curl_transfer.h"

#include "uploader/upload_libs.h"

namespace flightrec::uploader {
namespace {

// Loaded by S3Client::GlobalInit, which every caller has passed.
const UploadLibs& Curl() { return *LoadUploadLibs(); }

}  // namespace

CURLcode NoTlsKeyLog(CURL*, void* ssl_ctx, void*) {
  // libcurl has set its SSLKEYLOGFILE callback on this context already when
  // its keylog file is open (7.88: ossl_connect_step1 sets it, then calls
  // us): take it off again.
  if (ssl_ctx) Curl().ssl_ctx_set_keylog_callback(static_cast<SSL_CTX*>(ssl_ctx), nullptr);
  return CURLE_OK;
}

void SetCommonRequestOptions(CURL* e, const char* url, curl_slist* headers, long connect_timeout_ms) {
  Curl().easy_setopt(e, CURLOPT_URL, url);
  Curl().easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  Curl().easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  Curl().easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  Curl().easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  Curl().easy_setopt(e, CURLOPT_USERAGENT, "flightrec");
  Curl().easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout_ms);
  // Our TLS secrets never reach a key-log file, even one the program's own
  // use of this libcurl opened (GlobalInit refuses to open one itself).
  Curl().easy_setopt(e, CURLOPT_SSL_CTX_FUNCTION, NoTlsKeyLog);
}

TransferEnd StepTransfer(S3Control* control, CURLM* m, CURL* e, curl_slist* headers, long poll_ms, CURLcode* result,
                         long* status) {
  *result = CURLE_OK;
  bool finished = false, stopped = false;
  for (;;) {
    if (!control->EnterStep()) return TransferEnd::kAbandoned;  // exiting: leave libcurl alone
    int running = 0;
    const CURLMcode mc = Curl().multi_perform(m, &running);
    if (mc == CURLM_OK && running == 0) {
      int left = 0;
      while (CURLMsg* msg = Curl().multi_info_read(m, &left))
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == e) *result = msg->data.result;
      finished = true;
    } else if (mc != CURLM_OK) {
      *result = CURLE_FAILED_INIT;
      finished = true;
    } else if (control->ShouldStop()) {
      stopped = true;
    } else {
      Curl().multi_poll(m, nullptr, 0, static_cast<int>(poll_ms), nullptr);
    }
    if (finished || stopped) {
      if (finished) Curl().easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
      Curl().multi_remove_handle(m, e);
      Curl().slist_free_all(headers);
      control->LeaveStep();
      return finished ? TransferEnd::kFinished : TransferEnd::kStopped;
    }
    control->LeaveStep();
  }
}

}  // namespace flightrec::uploader
