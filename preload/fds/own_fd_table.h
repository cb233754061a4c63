// Own descriptor table: the flush thread does its file work (segment writes,
// /proc reads, ELF and debug files for names) in a descriptor table of its
// own, so none of those files ever shows in the program's.
//
// Why: a new descriptor takes the lowest free number, and the recorder's
// short-lived files (a segment open for one write, /proc/self/maps, a
// library libdw reads, a .debug file while libdw maps it) were visible to
// the program for as long as they were open. A program that lists or probes
// its descriptors saw them: CPython's test_subprocess.test_pass_fds failed
// about one run in three on a busy machine (its exec'd child found fd 3 or
// 4 open: our child recorder reading a .debug file), test_pass_fds_redirected
// found an extra entry in /proc/self/fd. Moving a file high after the open
// only narrows the window; a table of our own closes it.
//
// How: at its first live tick, after the live hooks have started the
// collection (hosted by this thread, or a sampler thread that stays in the
// program's table), the flush thread calls unshare(CLONE_FILES), closes its copies of the program's
// descriptors at once (keeping only numbers protected as ours: a pinned
// output directory), and fills 0-2 with /dev/null so nothing of ours lands
// there. From then on fd_guard.h keeps its marks for this table apart
// (format::t_own_fd_table).
//
// When it does not (the flush thread stays in the program's table, as
// before): a seccomp filter may be in force (unshare or pidfd_getfd could be
// what it kills on); S3 upload is configured (the uploader thread and the
// flush thread hand descriptors to each other); the sampler uses perf, or
// is off; the main thread has left already (no exit keeper can be made for
// the exit below); the kernel is older than 5.6 (pidfd_getfd, for log
// lines); a TSan build (TSan tracks descriptors by number across threads).
//
// What changes for the rest of the recorder:
//  * Log lines from this thread go to the program's stderr through
//    BorrowProgramFd (pidfd_getfd: a copy for the one write). Once the main
//    thread has left (pthread_exit), the kernel has no table to copy from
//    and such lines are lost.
//  * A process whose last thread leaves after main's pthread_exit ends by
//    exit(0) on a thread that still has the program's files (atexit
//    handlers flush stdio into them), not on this thread: the exit keeper
//    the main thread made as it left (preload/runtime/exit_keeper.h), or
//    the sampler thread when it has one (FLIGHTREC_SAMPLER_THREAD=1).
//  * The program taking SIGPROF in auto mode hands sampling to perf, whose
//    descriptors its threads close by number: the hand-over is made on the
//    program's thread, inside its sigaction call (sampler.cc), not here.
//  * What the flush thread looks up in the program's table (a socket's
//    names and inode, whether a tracked socket is still open) goes through
//    ProgramFd.
//  * A forked child does not inherit this table: the parent's flush-thread
//    numbers mean nothing there (FlushThreadHasOwnFdTable).
#pragma once

namespace flightrec {

// Flush thread, once live. True if the calling thread now has a table of
// its own; false (and nothing changed) if one of the conditions above says
// no, with the reason in *why_not.
bool TakeOwnFdTable(const char** why_not);

// Whether the flush thread works in a table of its own (process-wide).
bool FlushThreadHasOwnFdTable();
// A forked child's flush thread starts in the program's table again.
void OwnFdTableAfterForkChild();

// On a thread with its own table: a copy of the program's descriptor `fd`
// in this table (close it after use), or -1. Elsewhere: -1.
int BorrowProgramFd(int fd);

// Whether the program's table can be looked into from here: always on a
// thread in it; on one with its own table, while the main thread (whose
// table pidfd_getfd reads) has not left. A failed borrow means "closed"
// only when this says yes.
bool ProgramTableReachable();

// A program's descriptor, looked at (fstat, getsockname) from any recorder
// thread: the number itself in the program's table; on a thread with its
// own table, a copy borrowed for the scope. fd() is -1 if the program has
// no such descriptor or its table cannot be reached. Holding the copy keeps
// the file open for those few system calls, no longer.
class ProgramFd {
 public:
  explicit ProgramFd(int fd);
  ~ProgramFd();
  int fd() const { return fd_; }
  ProgramFd(const ProgramFd&) = delete;
  ProgramFd& operator=(const ProgramFd&) = delete;

 private:
  int fd_;
  bool borrowed_;
};

}  // namespace flightrec
