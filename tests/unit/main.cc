// doctest entry point for build/unit_tests. Suites: "concurrency" tests also
// run under TSan (make check-sanitizers).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
