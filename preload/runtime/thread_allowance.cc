// Thread allowance: see thread_allowance.h.
#include "preload/runtime/thread_allowance.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "preload/runtime/log.h"

namespace flightrec {

bool NprocRoomFor(unsigned long long soft_limit) {
  return soft_limit == RLIM_INFINITY || soft_limit >= kMinNprocForRecording;
}

bool NprocLeavesRoomForRecorder(unsigned long* soft) {
  const int saved = errno;
  rlimit lim{};
  const bool known = syscall(SYS_prlimit64, 0, RLIMIT_NPROC, nullptr, &lim) == 0;
  errno = saved;
  if (!known || NprocRoomFor(lim.rlim_cur)) return true;
  *soft = static_cast<unsigned long>(lim.rlim_cur);
  return false;
}

bool NprocStillLeavesRoom(const char* consequence) {
  unsigned long soft = 0;
  if (NprocLeavesRoomForRecorder(&soft)) return true;
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    Log(LogLevel::kWarn,
        "RLIMIT_NPROC lowered to %lu, under the %lu the recorder needs: %s; the service is "
        "unaffected",
        soft, kMinNprocForRecording, consequence);
  return false;
}

}  // namespace flightrec
