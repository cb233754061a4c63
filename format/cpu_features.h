// CPU feature bits the recorder and the format branch on (the CRC's SSE4.2,
// the socket clock's invariant TSC), read from glibc's copy: the dynamic
// loader executed CPUID once at start and keeps the bits
// (<sys/platform/x86.h>, glibc 2.33 and later). Executing CPUID again traps
// to the hypervisor on a VM (about 8 us each where this was measured), and
// every process asked six times at start (issue #39). Without that header,
// or off x86-64, CPUID itself.
#pragma once

#if defined(__x86_64__)
#include <cpuid.h>
#if __has_include(<sys/platform/x86.h>)
// The header's inline functions are C: they return _Bool, which g++ takes
// as an extension and clang++ does not.
#if defined(__clang__)
#define _Bool bool
#include <sys/platform/x86.h>
#undef _Bool
#else
#include <sys/platform/x86.h>
#endif
#define FR_HAVE_GLIBC_CPU_FEATURES 1
#endif
#endif

namespace flightrec::cpu {

inline bool HasSse42() {
#if defined(FR_HAVE_GLIBC_CPU_FEATURES)
  return CPU_FEATURE_PRESENT(SSE4_2);
#elif defined(__x86_64__)
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_SSE4_2) != 0;
#else
  return false;
#endif
}

inline bool HasInvariantTsc() {
#if defined(FR_HAVE_GLIBC_CPU_FEATURES)
  return CPU_FEATURE_PRESENT(INVARIANT_TSC);
#elif defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
  return __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8)) != 0;
#else
  return false;
#endif
}

}  // namespace flightrec::cpu
