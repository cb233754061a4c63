// Demangle: turns a linker symbol into the name a person wrote, for every
// language whose symbols reach a trace. C++ (Itanium ABI, "_Z...") and Rust,
// in both of its schemes: legacy ("_ZN...17h<16 hex>E", Itanium-shaped but
// with Rust's own escapes and a hash) and v0 ("_R..."). Anything else (C, Go,
// a name already plain) comes back unchanged.
#pragma once
#include <string>

namespace flightrec::stacks {

// Not async-signal-safe: the C++ demangler allocates. Called from the
// recorder's own threads (symbolization, thread start events) only.
std::string Demangle(const char* name);

}  // namespace flightrec::stacks
