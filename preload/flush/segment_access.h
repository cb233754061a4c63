// Segment access: how the segment writer reaches its .active file between
// writes. The writer holds no descriptor between writes (format/
// segment_writer.h), so the program never sees one of ours in /proc/self/fd,
// never inherits one through fork, and never finds a number taken by us:
// CPython's test_subprocess.test_pass_fds_redirected lists a child's
// descriptors and found the child's own segment there (issue 38 item 13).
//
// Each write opens the file by name relative to a freshly opened output
// directory descriptor (output_dir.h: FLIGHTREC_OUTPUT walked safely, or the
// pinned uid-N after a privilege drop), as one of our descriptors (high,
// close-on-exec, protected from the program's closes: preload/fds/fd_guard.h),
// takes a shared flock on it for the write (other processes' disk budgets
// never delete a file mid-write, writer_liveness.h) and closes it after.
// Flush thread (or the thread that took the writer over) only.
#pragma once

#include "format/segment_writer.h"

namespace flightrec {

// The one instance; lives for the process.
format::SegmentFileAccess* OutputSegmentAccess();

}  // namespace flightrec
