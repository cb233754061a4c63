// Text that ends up in a request header of ours: no control character
// (issue 38 item 7).
//
// Why: a value holding CR LF becomes a second header line on the wire (a
// session token "x\r\nX-Injected: 1" fetched from a container credentials
// endpoint was sent to S3 as an extra header), and other control characters
// are no valid header text either. Credentials become headers
// (x-amz-security-token, the access key id in Authorization), so every
// credential field is held to the same rule where it is read (environment,
// shared files, STS, container endpoint, instance metadata), and every
// header is checked again where a request is built (S3Client, HttpFetcher):
// a value that fails is never sent.
//
// Control character: any byte below 0x20 (tab included) or 0x7f.
#pragma once
#include <string_view>

#include "uploader/s3/sigv4.h"

namespace flightrec::uploader {

bool HasControlChar(std::string_view text);

// The name of the first field of `c` that holds a control character
// ("access key id", "secret access key", "session token"), or nullptr.
// Never the value.
const char* CredentialFieldWithControlChar(const Credentials& c);

// A header line "Name: value" as handed to libcurl: false when the name or
// the value holds a control character (a line break above all).
bool HeaderLineClean(std::string_view line);

}  // namespace flightrec::uploader
