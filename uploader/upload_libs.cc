// dlopen of libcurl and libcrypto for the uploader (see upload_libs.h).
#include "uploader/upload_libs.h"

#include <dlfcn.h>

#include <mutex>

#include "preload/runtime/loader_quiesce.h"

namespace flightrec::uploader {
namespace {

UploadLibs g_libs;
const UploadLibs* g_loaded = nullptr;
std::string g_error;
std::once_flag g_once;

void* Open(const char* const* names, std::string* error) {
  for (const char* const* n = names; *n; ++n) {
    if (void* h = OwnDlopen(*n, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  const char* why = dlerror();
  *error = std::string("cannot load ") + names[0] + (why ? std::string(": ") + why : std::string());
  return nullptr;
}

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out, std::string* error) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!*out) *error = std::string("missing function ") + name;
  return *out != nullptr;
}

void Load() {
  // The sonames of the Debian packages the build uses (libcurl4-openssl-dev,
  // libssl-dev); the unversioned names only exist with the -dev packages.
  static const char* const kCurl[] = {"libcurl.so.4", "libcurl.so", nullptr};
  static const char* const kCrypto[] = {"libcrypto.so.3", "libcrypto.so", nullptr};
  static const char* const kSsl[] = {"libssl.so.3", "libssl.so", nullptr};
  void* curl = Open(kCurl, &g_error);
  if (!curl) return;
  void* crypto = Open(kCrypto, &g_error);
  if (!crypto) return;
  void* ssl = Open(kSsl, &g_error);
  if (!ssl) return;
  UploadLibs& l = g_libs;
  std::string& e = g_error;
  const bool ok =
      Resolve(curl, "curl_global_init", &l.global_init, &e) && Resolve(curl, "curl_easy_init", &l.easy_init, &e) &&
      Resolve(curl, "curl_easy_cleanup", &l.easy_cleanup, &e) && Resolve(curl, "curl_easy_reset", &l.easy_reset, &e) &&
      Resolve(curl, "curl_easy_setopt", &l.easy_setopt, &e) &&
      Resolve(curl, "curl_easy_getinfo", &l.easy_getinfo, &e) &&
      Resolve(curl, "curl_easy_strerror", &l.easy_strerror, &e) &&
      Resolve(curl, "curl_slist_append", &l.slist_append, &e) &&
      Resolve(curl, "curl_slist_free_all", &l.slist_free_all, &e) &&
      Resolve(curl, "curl_multi_init", &l.multi_init, &e) &&
      Resolve(curl, "curl_multi_cleanup", &l.multi_cleanup, &e) &&
      Resolve(curl, "curl_multi_add_handle", &l.multi_add_handle, &e) &&
      Resolve(curl, "curl_multi_remove_handle", &l.multi_remove_handle, &e) &&
      Resolve(curl, "curl_multi_perform", &l.multi_perform, &e) &&
      Resolve(curl, "curl_multi_poll", &l.multi_poll, &e) &&
      Resolve(curl, "curl_multi_info_read", &l.multi_info_read, &e) &&
      Resolve(crypto, "OPENSSL_init_crypto", &l.openssl_init_crypto, &e) &&
      Resolve(crypto, "EVP_sha256", &l.evp_sha256, &e) && Resolve(crypto, "EVP_Digest", &l.evp_digest, &e) &&
      Resolve(crypto, "EVP_MD_CTX_new", &l.evp_md_ctx_new, &e) &&
      Resolve(crypto, "EVP_MD_CTX_free", &l.evp_md_ctx_free, &e) &&
      Resolve(crypto, "EVP_DigestInit_ex", &l.evp_digest_init_ex, &e) &&
      Resolve(crypto, "EVP_DigestUpdate", &l.evp_digest_update, &e) &&
      Resolve(crypto, "EVP_DigestFinal_ex", &l.evp_digest_final_ex, &e) && Resolve(crypto, "HMAC", &l.hmac, &e) &&
      Resolve(crypto, "CONF_get1_default_config_file", &l.conf_default_file, &e) &&
      Resolve(crypto, "CRYPTO_free", &l.crypto_free, &e) &&
      Resolve(ssl, "SSL_CTX_set_keylog_callback", &l.ssl_ctx_set_keylog_callback, &e);
  if (ok) g_loaded = &g_libs;
}

}  // namespace

const UploadLibs* LoadUploadLibs(std::string* error) {
  std::call_once(g_once, Load);
  if (!g_loaded && error) *error = g_error;
  return g_loaded;
}

}  // namespace flightrec::uploader
