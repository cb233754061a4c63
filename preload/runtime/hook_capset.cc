// The capset hook: the program's capability change, made on the calling
// thread as always, then on the recorder's threads too (recorder_caps.h:
// glibc's all-threads setgid/setgroups would otherwise fail on ours and
// abort the program). syscall(SYS_capset) comes here through the syscall
// hook (preload/crash/hook_signal.cc).
#include <errno.h>
#include <sys/syscall.h>

#include "preload/crash/raw_syscall.h"
#include "preload/runtime/recorder_caps.h"

namespace flightrec {

long CapsetThroughHook(const void* header, const void* data) {
  const long rc = RawSyscall6(SYS_capset, reinterpret_cast<long>(header), reinterpret_cast<long>(data), 0, 0, 0, 0);
  if (rc == 0) {
    const int saved = errno;
    RecorderCapsAfterCapset(header, data);
    errno = saved;
  }
  return rc;  // 0, or -errno as the kernel gave it
}

}  // namespace flightrec

extern "C" __attribute__((visibility("default"))) int capset(void* header, const void* data) {
  const long rc = flightrec::CapsetThroughHook(header, data);
  if (rc < 0) {
    errno = static_cast<int>(-rc);
    return -1;
  }
  return 0;
}
