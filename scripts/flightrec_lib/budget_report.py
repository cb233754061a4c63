"""budget_report: what the disk budget deleted, from the tally the recorder
keeps in each output directory (`.flightrec-budget`,
preload/flush/budget_tally.h). `info` prints it.

Why a file and not only the trace: the process whose seal brought a budget
scan may exit right after it (its footer drop `segments.deleted_for_budget`
would reach no segment), and the segment that reports a deletion may itself
be deleted later. The tally is shared by every process writing into the
directory and keeps running totals since it was made.

Layout: 8 bytes of magic "FRBUDG2\\0", then nine uint64 in the writer's
(native) byte order: bytes, last_scan_ns, since_ns, deleted_segments,
deleted_bytes, deleted_incidents, expired_windows, expired_bytes,
last_deletion_ns (CLOCK_REALTIME ns). Any other content is ignored."""
import os
import stat
import struct

TALLY_NAME = ".flightrec-budget"
_LAYOUT = struct.Struct("=8s9Q")
_MAGIC = b"FRBUDG2\0"
_FIELDS = ("counted_bytes", "last_scan_wall_ns", "since_wall_ns", "deleted_segments", "deleted_bytes",
           "deleted_incidents", "expired_windows", "expired_bytes", "last_deletion_wall_ns")


def read_tally(path):
    """The tally at path as a dict, or None if it is not one."""
    # Never blocks on a FIFO or follows a link someone planted under that name.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _LAYOUT.size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) != _LAYOUT.size:
        return None
    magic, *values = _LAYOUT.unpack(data)
    if magic != _MAGIC:
        return None
    doc = dict(zip(_FIELDS, values))
    doc["path"] = path
    if not doc["last_deletion_wall_ns"]:
        doc["last_deletion_wall_ns"] = None
    return doc


def find(paths):
    """[tally dict] of every local directory among paths and the directories
    under it the reader walks (uid-N after a privilege drop)."""
    out = []
    for path in paths:
        if path.startswith("s3://") or not os.path.isdir(path):
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if TALLY_NAME in files:
                doc = read_tally(os.path.join(root, TALLY_NAME))
                if doc:
                    out.append(doc)
    return out


def print_text(tallies, format_wall, format_bytes):
    """The `disk budget` section of `info`."""
    for t in tallies:
        print("\ndisk budget (%s, since %s):" % (t["path"], format_wall(t["since_wall_ns"])))
        print("  deleted to stay under FLIGHTREC_MAX_DISK_BYTES: %d segment%s (%s)%s" % (
            t["deleted_segments"], "" if t["deleted_segments"] == 1 else "s", format_bytes(t["deleted_bytes"]),
            ", %d of them kept incidents" % t["deleted_incidents"] if t["deleted_incidents"] else ""))
        print("  window segments expired (older than the window): %d (%s)" % (
            t["expired_windows"], format_bytes(t["expired_bytes"])))
        if t["last_deletion_wall_ns"]:
            print("  last deletion: %s" % format_wall(t["last_deletion_wall_ns"]))
