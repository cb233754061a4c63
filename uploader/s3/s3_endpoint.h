// S3 endpoint resolution: region, endpoint URL, addressing style, object keys.
//
// Rules (issue 6):
//  * region: FLIGHTREC_S3_REGION, else AWS_REGION, else AWS_DEFAULT_REGION,
//    else us-east-1.
//  * endpoint: FLIGHTREC_S3_ENDPOINT, else AWS_ENDPOINT_URL_S3, else
//    AWS_ENDPOINT_URL, else https://s3.{region}.amazonaws.com (".com.cn" for
//    cn-* regions). http and https only.
//  * addressing: FLIGHTREC_S3_PATH_STYLE when set; otherwise path-style for
//    custom endpoints and for bucket names that are not plain DNS labels
//    (dots break TLS wildcard certificates), virtual-hosted otherwise.
// Keys: {prefix}/{service}/{yyyy-mm-dd}/{host}/{segment file name}.
#pragma once
#include <ctime>
#include <string>
#include <string_view>

namespace flightrec::uploader {

// The AWS_* variables the rules above consult, snapshotted at init.
struct EndpointEnv {
  std::string aws_region, aws_default_region, aws_endpoint_url_s3, aws_endpoint_url;
};
EndpointEnv EndpointEnvFrom(const char* const* envp);

struct EndpointSettings {
  std::string bucket;
  std::string region;    // FLIGHTREC_S3_REGION ("" = fall back)
  std::string endpoint;  // FLIGHTREC_S3_ENDPOINT ("" = fall back)
  int path_style = -1;   // FLIGHTREC_S3_PATH_STYLE: -1 auto, 0 virtual-hosted, 1 path
};

struct S3Endpoint {
  std::string scheme;     // "http" or "https"
  std::string host;       // the Host header: [bucket.]host[:port] (default port omitted)
  std::string base_path;  // path prefix of a custom endpoint ("" or "/x", no trailing '/')
  std::string bucket;
  std::string region;
  bool path_style = false;
  bool custom = false;  // endpoint came from configuration, not AWS's default

  // Raw (unencoded) request path of an object / the bucket itself.
  std::string ObjectPath(std::string_view key) const;
  std::string BucketPath() const;
  // scheme://host + an already-encoded path (and optional "?query").
  std::string Url(std::string_view encoded_path_and_query) const;
};

// false with *error (one line, no secrets) when the configuration is unusable.
bool ResolveS3Endpoint(const EndpointSettings& settings, const EndpointEnv& env, S3Endpoint* out, std::string* error);

// True for names S3 accepts today: 3-63 of [a-z0-9.-], alphanumeric at both ends.
bool IsValidBucketName(std::string_view bucket);

// {prefix}/{service}/{yyyy-mm-dd}/{host}/{file_name}; empty prefix is omitted,
// '/' inside service or host becomes '_', empty ones become "unknown".
std::string SegmentKey(std::string_view prefix, std::string_view service, time_t utc_seconds, std::string_view host,
                       std::string_view file_name);
// A segment window mode kept for an incident (preload/flush/window_keeper.h):
// {prefix}/{service}/{yyyy-mm-dd}/{host}/incident-{tag}-{pid}/{file_name},
// the date being the incident's, so one incident's objects share a prefix.
std::string IncidentSegmentKey(std::string_view prefix, std::string_view service, time_t incident_utc_seconds,
                               std::string_view host, std::string_view tag, std::string_view pid,
                               std::string_view file_name);

}  // namespace flightrec::uploader
