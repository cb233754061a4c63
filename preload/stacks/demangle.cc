// Demangle (see demangle.h). Rust goes through libiberty's demangler, the one
// binutils and gdb use (Debian's libiberty-dev, linked statically and kept out
// of the library's exported symbols); C++ through the C++ runtime's
// __cxa_demangle, which the host has loaded anyway.
#include "preload/stacks/demangle.h"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>

// libiberty.h (which demangle.h pulls in) declares basename() unless told
// the system already has; glibc's <cstring> does, with other overloads.
#define HAVE_DECL_BASENAME 1
#include <libiberty/demangle.h>

namespace flightrec::stacks {
namespace {

// Rust first: a legacy Rust symbol is also a valid Itanium name, which
// __cxa_demangle would render with the escapes ("_$LT$", "..") and the hash
// still in. rust_demangle_callback answers 0 for anything that is not Rust
// (it checks the legacy hash's shape), allocates nothing, and bounds its
// recursion, so a hostile symbol table cannot run it out of stack. Without
// DMGL_VERBOSE it leaves out the hash and v0's crate disambiguators, as
// Rust's own backtraces do.
bool DemangleRust(const char* name, std::string* out) {
  if (!(name[0] == '_' && (name[1] == 'R' || name[1] == 'Z'))) return false;
  out->clear();
  auto append = [](const char* piece, size_t n, void* opaque) { static_cast<std::string*>(opaque)->append(piece, n); };
  return rust_demangle_callback(name, DMGL_PARAMS | DMGL_ANSI, append, out) && !out->empty();
}

bool DemangleCxx(const char* name, std::string* out) {
  if (!(name[0] == '_' && name[1] == 'Z')) return false;
  int status = 0;
  char* text = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  const bool ok = status == 0 && text;
  if (ok) out->assign(text);
  free(text);  // allocated by the demangler with malloc
  return ok;
}

}  // namespace

std::string Demangle(const char* name) {
  if (!name) return std::string();
  std::string out;
  if (DemangleRust(name, &out) || DemangleCxx(name, &out)) return out;
  return std::string(name);
}

}  // namespace flightrec::stacks
