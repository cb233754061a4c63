// Released descriptors: numbers a library we use still believes it owns
// after we closed them on its behalf.
//
// The symbolizer maps a separate debug-info file whole and closes its
// descriptor at once (sampler/symbols/symbolizer.cc), so that the host's fd table
// does not hold one file per module for the whole run. libdw keeps the
// number, though, and closes it when it drops the module (dwfl_report_end,
// dwfl_end), when it may be the application's. So the symbolizer lists each
// number it released and wraps libdw's dropping calls in a ReleasedFdScope:
// inside one, on that thread only, the close hook (preload/fds/hook_fd.cc)
// swallows one close of each listed number (returns 0, closes nothing) and
// unlists it.
//
// Invariant: libdw is never handed a new descriptor whose number is listed
// (it would then close that number twice: the second close would be real).
// The symbolizer's callbacks pass every descriptor they give libdw through
// AvoidReleasedNumber.
//
// Threads: the list belongs to the thread that symbolizes (the flush thread,
// which also does the final drain at exit); the scope
// flag is initial-exec TLS, so the close hook reads it without a call.
// Async-signal-safe, no allocation.
#pragma once

namespace flightrec {

// Whether releasing works in this process: libdw's close() must reach our
// close hook first. Another interposer of close ahead of us in the lookup
// order (a sanitizer runtime preloaded first: TSan's interceptor would see
// libdw close a number the application owns) means no fd is released.
bool CloseHookComesFirst();

// Lists fd as released; false when the list is full (the caller then keeps
// the descriptor open).
bool ListReleasedFd(int fd);
// fd itself, or, if its number is listed, the same file moved to an
// unlisted number (the original closed; fd-guard protection moves along).
int AvoidReleasedNumber(int fd);
// libdw will close none of the listed numbers any more (after dwfl_end).
void ForgetReleasedFds();
int ReleasedFdCount();

extern __thread bool t_in_released_fd_scope __attribute__((tls_model("initial-exec")));
// For the close hook, inside a scope: true (and unlisted) if fd was listed.
bool SwallowReleasedClose(int fd);

class ReleasedFdScope {
 public:
  ReleasedFdScope() { t_in_released_fd_scope = true; }
  ~ReleasedFdScope() { t_in_released_fd_scope = false; }
  ReleasedFdScope(const ReleasedFdScope&) = delete;
  ReleasedFdScope& operator=(const ReleasedFdScope&) = delete;
};

}  // namespace flightrec
