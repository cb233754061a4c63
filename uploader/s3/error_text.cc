// Server texts shortened for one log line (see error_text.h).
#include "uploader/s3/error_text.h"

namespace flightrec::uploader {

std::string Shorten(std::string_view s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out.push_back(static_cast<unsigned char>(c) < 0x20 ? ' ' : c);
  }
  return out;
}

}  // namespace flightrec::uploader
