// Privilege-drop hooks: setuid, seteuid, setreuid, setresuid. A server
// started as root (nginx, postfix, sshd...) switches its workers to an
// unprivileged uid; from then on they cannot enter the root-owned 0700
// output directory. When a call is about to turn effective uid 0 into a
// non-zero uid, the recorder seals its segment while still root and moves to
// OUTPUT/uid-N (preload/flush/output_dir.h); the real call runs unchanged in
// between (glibc's own setuid, which applies the change to every thread).
// The way back (seteuid(N), work, seteuid(0): a root daemon doing something
// as a user for a while) is followed too: the segment written as N is sealed
// in uid-N, and root records on in OUTPUT, never in the directory N owns.
// Only the effective uid matters: it decides what the process can open.
// setgid & co. need nothing: our files and directories are 0600/0700.
#include <dlfcn.h>
#include <errno.h>
#include <sys/types.h>
#include <unistd.h>

namespace flightrec {
bool RecorderBeforeUidDrop(uid_t uid);
void RecorderAfterUidDrop(bool dropped);
bool RecorderBeforeUidReturn();
void RecorderAfterUidReturn(bool returned);
}  // namespace flightrec

namespace {

using SetuidFn = int (*)(uid_t);
using SetreuidFn = int (*)(uid_t, uid_t);
using SetresuidFn = int (*)(uid_t, uid_t, uid_t);

// Resolved at load time: a vfork child may call these before exec, and
// should not enter the dynamic loader.
SetuidFn g_real_setuid = nullptr;
SetuidFn g_real_seteuid = nullptr;
SetreuidFn g_real_setreuid = nullptr;
SetresuidFn g_real_setresuid = nullptr;

__attribute__((constructor)) void ResolveSetuidFunctions() {
  g_real_setuid = reinterpret_cast<SetuidFn>(dlsym(RTLD_NEXT, "setuid"));
  g_real_seteuid = reinterpret_cast<SetuidFn>(dlsym(RTLD_NEXT, "seteuid"));
  g_real_setreuid = reinterpret_cast<SetreuidFn>(dlsym(RTLD_NEXT, "setreuid"));
  g_real_setresuid = reinterpret_cast<SetresuidFn>(dlsym(RTLD_NEXT, "setresuid"));
}

constexpr uid_t kUnchanged = static_cast<uid_t>(-1);

// Runs `call`; around it the recorder's move when the effective uid goes
// from root to new_euid, or back to root (kUnchanged: the call leaves it alone).
template <typename Call>
int AroundUidChange(uid_t new_euid, Call call) {
  if (new_euid == 0 && geteuid() != 0 && flightrec::RecorderBeforeUidReturn()) {
    const int rc = call();
    const int saved = errno;
    flightrec::RecorderAfterUidReturn(rc == 0 && geteuid() == 0);
    errno = saved;
    return rc;
  }
  const bool drop =
      new_euid != kUnchanged && new_euid != 0 && geteuid() == 0 && flightrec::RecorderBeforeUidDrop(new_euid);
  const int rc = call();
  if (drop) {
    const int saved = errno;
    flightrec::RecorderAfterUidDrop(rc == 0 && geteuid() == new_euid);
    errno = saved;
  }
  return rc;
}

// Called before our constructor (from another library's): resolve now.
template <typename Fn>
bool Resolved(Fn* real) {
  if (!*real) ResolveSetuidFunctions();
  if (*real) return true;
  errno = ENOSYS;
  return false;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int setuid(uid_t uid) {
  if (!Resolved(&g_real_setuid)) return -1;
  return AroundUidChange(uid, [&] { return g_real_setuid(uid); });
}

__attribute__((visibility("default"))) int seteuid(uid_t euid) {
  if (!Resolved(&g_real_seteuid)) return -1;
  return AroundUidChange(euid, [&] { return g_real_seteuid(euid); });
}

__attribute__((visibility("default"))) int setreuid(uid_t ruid, uid_t euid) {
  if (!Resolved(&g_real_setreuid)) return -1;
  return AroundUidChange(euid, [&] { return g_real_setreuid(ruid, euid); });
}

__attribute__((visibility("default"))) int setresuid(uid_t ruid, uid_t euid, uid_t suid) {
  if (!Resolved(&g_real_setresuid)) return -1;
  return AroundUidChange(euid, [&] { return g_real_setresuid(ruid, euid, suid); });
}

}  // extern "C"
