// One libcurl request of ours, shared by S3Client (uploader/s3/s3_client.h)
// and HttpFetcher (uploader/credentials/http_fetch.h): the options every
// request sets, and the loop that steps a transfer to its end through a
// private multi handle, each step inside S3Control's fence, so a shutdown
// deadline stops it within ~poll_ms and an exiting process is never inside
// libcurl.
#pragma once
#include <curl/curl.h>

#include "uploader/s3/s3_client.h"

namespace flightrec::uploader {

// URL, headers, no signals, http(s) only, no redirects, our user agent, the
// connect timeout, and no TLS key log (NoTlsKeyLog). Inside a step, on a
// handle just easy_reset.
void SetCommonRequestOptions(CURL* easy, const char* url, curl_slist* headers, long connect_timeout_ms);

// CURLOPT_SSL_CTX_FUNCTION of every request of ours: clears the key-log
// callback libcurl puts on the TLS context when a key-log file is open in
// the process (SSLKEYLOGFILE, read once at libcurl's global init, perhaps
// by the program's own use of the same libcurl), so our secrets are never
// written there. libcurl calls it after its own TLS settings.
CURLcode NoTlsKeyLog(CURL* easy, void* ssl_ctx, void* unused);

enum class TransferEnd {
  kFinished,   // *result holds libcurl's code, *status the HTTP status (0: none)
  kStopped,    // control->ShouldStop(): the handle is removed, headers freed
  kAbandoned,  // control->EnterStep() refused: handles and headers left as they are
};

// Steps `easy`, already added to `multi`, to its end. Called outside a step;
// every libcurl call it makes is inside one. Waits up to poll_ms per step.
// On kFinished and kStopped, `easy` is removed from `multi` and `headers`
// freed.
TransferEnd StepTransfer(S3Control* control, CURLM* multi, CURL* easy, curl_slist* headers, long poll_ms,
                         CURLcode* result, long* status);

}  // namespace flightrec::uploader
