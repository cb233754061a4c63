// Unit tests for preload/stacks/demangle: real symbols as rustc 1.95 and g++ 12
// emit them (copied from `nm` of built programs), both Rust schemes, C++,
// and names that must come back as they went in.
#include <doctest/doctest.h>

#include "preload/stacks/demangle.h"
namespace stacks = flightrec::stacks;

using flightrec::stacks::Demangle;

TEST_CASE("demangle: Rust legacy symbols lose the hash and the escapes") {
  CHECK(stacks::Demangle("_ZN4main5inner6Worker6crunch17h2b58dd977c1d184eE") == "main::inner::Worker::crunch");
  CHECK(stacks::Demangle("_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17hdbee5a3fa7ab6636E") ==
        "std::rt::lang_start::{{closure}}");
  CHECK(
      stacks::Demangle("_ZN4core3ops8function6FnOnce40call_once$u7b$$u7b$vtable.shim$u7d$$u7d$17h584dd148505da648E") ==
      "core::ops::function::FnOnce::call_once{{vtable.shim}}");
}

TEST_CASE("demangle: Rust v0 symbols") {
  CHECK(stacks::Demangle("_RNvMNtCsjrHSEGnQ3l9_3std4timeNtB2_7Instant7elapsed") == "<std::time::Instant>::elapsed");
  CHECK(stacks::Demangle("_RNvMs7_NtCsgEmfK2I1SDS_4core3numy12wrapping_add") == "<u64>::wrapping_add");
}

TEST_CASE("demangle: C++ still goes through the C++ demangler") {
  CHECK(stacks::Demangle("_ZNSt6vectorIiSaIiEE9push_backERKi") ==
        "std::vector<int, std::allocator<int> >::push_back(int const&)");
  // Itanium-shaped like legacy Rust, but no "17h<16 hex>" hash: C++.
  CHECK(stacks::Demangle("_ZN3foo3barEv") == "foo::bar()");
  CHECK(stacks::Demangle("_ZN3foo3barE") == "foo::bar");
}

TEST_CASE("demangle: plain and broken names come back unchanged") {
  CHECK(stacks::Demangle("main") == "main");
  CHECK(stacks::Demangle("main.main") == "main.main");  // Go
  CHECK(stacks::Demangle("_Z") == "_Z");
  CHECK(stacks::Demangle("_Zq9garbage") == "_Zq9garbage");
  CHECK(stacks::Demangle("_RNvXq") == "_RNvXq");
  CHECK(stacks::Demangle("_R") == "_R");
  CHECK(stacks::Demangle("") == "");
  CHECK(stacks::Demangle(nullptr) == "");
}
