// Control characters in header text and credentials (see header_text.h).
#include "uploader/s3/header_text.h"

namespace flightrec::uploader {

bool HasControlChar(std::string_view text) {
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

const char* CredentialFieldWithControlChar(const Credentials& c) {
  if (HasControlChar(c.access_key_id)) return "access key id";
  if (HasControlChar(c.secret_access_key)) return "secret access key";
  if (HasControlChar(c.session_token)) return "session token";
  return nullptr;
}

bool HeaderLineClean(std::string_view line) { return !HasControlChar(line); }

}  // namespace flightrec::uploader
