// Secret scrubbing for log lines and error texts: whatever a server echoes
// back (an S3 <Message>, an STS error, a metadata endpoint's body), the keys
// and tokens the uploader holds never reach stderr.
//
// Two nets: exact removal of every secret the uploader has held (secret
// keys, session tokens, web identity and container tokens, IMDS session
// tokens), and removal of anything shaped like a JWT ("eyJ..." with two
// dots), which is what web identity tokens are, even one we never read.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace flightrec::uploader {

class SecretList {
 public:
  // Remembers a secret (ignored if shorter than 8 bytes: too likely to
  // match ordinary text). Keeps the most recent kMax; older ones are wiped.
  void Add(std::string_view secret);
  // Replaces every remembered secret and every JWT-shaped run in *text by "[redacted]".
  void Scrub(std::string* text) const;
  ~SecretList();

  static constexpr size_t kMax = 16;

 private:
  std::vector<std::string> secrets_;
};

// The JWT net alone (also applied by SecretList::Scrub).
void ScrubJwtLike(std::string* text);

}  // namespace flightrec::uploader
