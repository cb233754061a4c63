// Texts a server sent back (S3 <Message>, STS <Code>, libcurl's error text),
// made fit for one log line: shared by S3Client and the STS client
// (uploader/credentials/web_identity.cc).
#pragma once
#include <string>
#include <string_view>

namespace flightrec::uploader {

// At most `max` bytes, then "..."; control bytes become spaces. Secrets are
// the caller's business (redact before shortening: a cut secret no longer
// matches).
std::string Shorten(std::string_view s, size_t max = 160);

}  // namespace flightrec::uploader
