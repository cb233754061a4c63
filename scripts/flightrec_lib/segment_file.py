"""segment_file: opens the files flightrec-dump reads as segments, safely.

Files come from a recorded program, another user (a process that dropped root
can plant anything in its uid-N directory) or a crash. So: regular files only
(the open is non-blocking, so a FIFO cannot hang us; devices and sockets are
refused unread), no symbolic link followed inside a directory, nothing larger
than max_segment_file(), read in bounded pieces up to the size the file had
when opened. Descriptors kept open for re-reading EVENTS payloads on use
(segment.Batch) are counted against RLIMIT_NOFILE here."""
import os
import resource
import stat

# Files larger than this are refused (the recorder's default segment is 16 MiB);
# FLIGHTREC_DUMP_MAX_SEGMENT_MB raises it.
MAX_SEGMENT_FILE = 256 << 20
READ_PIECE = 1 << 20


class SegmentFileError(Exception):
    """The file cannot be read as a segment (message: one line)."""


def max_segment_file():
    """The largest file read as a segment (FLIGHTREC_DUMP_MAX_SEGMENT_MB)."""
    value = os.environ.get("FLIGHTREC_DUMP_MAX_SEGMENT_MB", "")
    if value.isdigit() and 0 < int(value) <= 1 << 20:
        return int(value) << 20
    return MAX_SEGMENT_FILE


def _regular(st):
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device" if
                stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
        raise SegmentFileError("%s, not a regular file; not read" % kind)


def read_file(path, follow=True, keep_open=False):
    """The bytes of a regular file, read in bounded pieces (with keep_open:
    (bytes, open descriptor), the caller closes it). follow=False: a
    symbolic link is refused, not followed (files found inside a directory,
    which someone else may have planted). FIFOs, sockets and devices are
    refused without reading (opening is non-blocking, so a FIFO cannot hang
    us), and so is a file larger than max_segment_file()."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        # Checked before opening too: opening some devices does something.
        st = os.stat(path) if follow else os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise SegmentFileError("a symbolic link inside the directory; not followed")
        _regular(st)
        fd = os.open(path, flags)
    except OSError as e:
        if not follow and os.path.islink(path):
            raise SegmentFileError("a symbolic link inside the directory; not followed") from None
        raise SegmentFileError(e.strerror or str(e)) from None
    try:
        st = os.fstat(fd)  # what was opened (the name may have changed since)
        _regular(st)
        limit = max_segment_file()
        if st.st_size > limit:
            raise SegmentFileError("%d bytes, larger than the %d MiB a segment may have (FLIGHTREC_DUMP_MAX_SEGMENT_MB)"
                               % (st.st_size, limit >> 20))
        # Read what the file held when opened (an active file keeps growing).
        buf = bytearray(st.st_size)
        view = memoryview(buf)
        got = 0
        while got < st.st_size:
            n = os.readv(fd, [view[got:got + READ_PIECE]])
            if n == 0:
                break  # shrank since fstat
            got += n
        view.release()
        del buf[got:]
        if keep_open:
            kept, fd = fd, -1
            return buf, kept
        return buf
    except OSError as e:
        raise SegmentFileError(e.strerror or str(e)) from None
    finally:
        if fd >= 0:
            os.close(fd)


# Segments whose EVENTS payloads are re-read from their open file on use
# (rather than held in memory), at most this many at once: each holds one
# descriptor until the segment is dropped. Past it, payloads are held.
open_sources = [0]


def source_budget():
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover
        soft = 1024
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(0, min(soft - 64, 1 << 14))


def close_source(fd):
    open_sources[0] -= 1
    try:
        os.close(fd)
    except OSError:
        pass
