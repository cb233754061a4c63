// Secret scrubbing: exact secrets and JWT-shaped runs become "[redacted]".
#include "uploader/credentials/secret_scrub.h"

#include <string.h>  // explicit_bzero

#include <cctype>

namespace flightrec::uploader {
namespace {

constexpr size_t kMinSecret = 8;
constexpr const char* kRedacted = "[redacted]";

bool IsBase64Url(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '='; }

void Wipe(std::string* s) {
  if (!s->empty()) explicit_bzero(s->data(), s->size());
  s->clear();
}

}  // namespace

void SecretList::Add(std::string_view secret) {
  if (secret.size() < kMinSecret) return;
  for (const std::string& s : secrets_)
    if (s == secret) return;
  if (secrets_.size() >= kMax) {
    Wipe(&secrets_.front());
    secrets_.erase(secrets_.begin());
  }
  secrets_.emplace_back(secret);
}

void SecretList::Scrub(std::string* text) const {
  for (const std::string& secret : secrets_) {
    for (size_t at = 0; (at = text->find(secret, at)) != std::string::npos;) {
      text->replace(at, secret.size(), kRedacted);
      at += strlen(kRedacted);
    }
  }
  ScrubJwtLike(text);
}

SecretList::~SecretList() {
  for (std::string& s : secrets_) Wipe(&s);
}

void ScrubJwtLike(std::string* text) {
  // header.payload.signature, each base64url; the header always starts "eyJ" ('{"').
  for (size_t at = 0; (at = text->find("eyJ", at)) != std::string::npos;) {
    if (at > 0 && IsBase64Url((*text)[at - 1])) {
      at += 3;
      continue;
    }
    size_t end = at, dots = 0;
    while (end < text->size() && (IsBase64Url((*text)[end]) || (*text)[end] == '.')) {
      if ((*text)[end] == '.') dots++;
      end++;
    }
    if (dots >= 1 && end - at >= 16) {
      text->replace(at, end - at, kRedacted);
      at += strlen(kRedacted);
    } else {
      at = end;
    }
  }
}

}  // namespace flightrec::uploader
