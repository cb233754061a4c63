"""trigger: asks live recorded processes to keep (and, with S3, ship) their
recent past, as if something had gone wrong now: an on-demand trigger.

    flightrec-dump trigger 4242            # one process
    flightrec-dump trigger redis-server    # every live process of that program

No signal is sent (the service may use every signal itself): a control file
`.trigger-PID-START` is written into the directory the process records into
(its FLIGHTREC_OUTPUT, or its uid-N after a privilege drop). START is the
process's start time as the kernel keeps it (field 22 of /proc/PID/stat), so
a file meant for an earlier process with the same pid is never obeyed. The
recorder's flush thread looks for it at most every 250 ms while it ticks (at
least once a second), checks it (a plain file owned by the process's user or
root, written after the process started), removes it, and writes a `trigger`
event with reason `demand` and the --note text.

Where a process records: with --output, there; else its own FLIGHTREC_OUTPUT
from /proc/PID/environ (readable by its user and root), else the default
/tmp/flightrec. Live processes are found from their `.active` segments there.
A SERVICE matches the service name in segment names (which has `-` and other
characters replaced by `_`), written either way, and the program's name as
`ps`/`pgrep` show it (/proc/PID/comm) or its argv[0] or executable."""
import os
import re
import stat
import time

from .. import cli

DEFAULT_OUTPUT = "/tmp/flightrec"
# <stamp>-<service>-<pid>-<seq>.active (preload/flush/segment_files.h)
ACTIVE_NAME = re.compile(r"^\d{8}T\d{6}(?:\.\d{3})?Z-(?P<service>[^-]+)-(?P<pid>\d+)-\d+\.active$")
# Control files (preload/flush/window_keeper.h): .trigger-PID-START, the
# earlier .trigger-PID, and temporary names while one is written.
CONTROL_NAME = re.compile(r"^\.trigger-(?P<pid>\d+)(?:-(?P<start>\d+))?(?P<tmp>\.\d+\.tmp)?$")


def register(subparsers):
    p = subparsers.add_parser("trigger", help="keep a live process's recent past (an on-demand incident)")
    p.add_argument("targets", nargs="+", metavar="PID|SERVICE",
                   help="a process id, or a service or program name (every live process of it)")
    p.add_argument("--output", metavar="DIR", default=None,
                   help="the recorder's output directory (default: each process's own FLIGHTREC_OUTPUT, "
                        "else %s)" % DEFAULT_OUTPUT)
    p.add_argument("--note", default="", help="text recorded with the trigger (one line, at most 200 bytes)")
    p.set_defaults(func=run)


def sanitized(name):
    """The service as the recorder writes it in file names (segment_files.h:
    [A-Za-z0-9._] kept, anything else `_`, at most 64 characters)."""
    out = "".join(c if (c.isascii() and c.isalnum()) or c in "._" else "_" for c in name)[:64]
    return out or "unknown"


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def start_ticks(pid):
    """Field 22 of /proc/PID/stat (start time, clock ticks since boot), or None."""
    data = _read("/proc/%d/stat" % pid, 4096)
    if not data or b")" not in data:
        return None
    fields = data.rsplit(b")", 1)[1].split()
    try:
        return int(fields[19])  # fields 3.. follow the command name
    except (IndexError, ValueError):
        return None


def effective_uid(pid):
    data = _read("/proc/%d/status" % pid, 8192)
    for line in (data or b"").splitlines():
        if line.startswith(b"Uid:"):
            parts = line.split()
            if len(parts) > 2 and parts[2].isdigit():
                return int(parts[2])
    return None


def program_names(pid):
    """What `ps`/`pgrep` and a user call the process: comm, argv[0]'s and the
    executable's base names (what can be read)."""
    names = set()
    comm = _read("/proc/%d/comm" % pid, 64)
    if comm:
        names.add(comm.rstrip(b"\n").decode("utf-8", "replace"))
    cmdline = _read("/proc/%d/cmdline" % pid, 65536)
    if cmdline:
        argv0 = cmdline.split(b"\0", 1)[0].decode("utf-8", "replace")
        if argv0:
            names.add(os.path.basename(argv0))
    try:
        names.add(os.path.basename(os.readlink("/proc/%d/exe" % pid)))
    except OSError:
        pass
    names.discard("")
    return names


def environment(pid):
    """{name: value} of pid's environment as it started ({} if unreadable)."""
    data = _read("/proc/%d/environ" % pid)
    env = {}
    for item in (data or b"").split(b"\0"):
        name, eq, value = item.partition(b"=")
        if eq:
            env[name.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
    return env


def output_of(pid):
    """The directory pid records into, from its own environment:
    (path, None), or (None, why) when /proc/PID/environ cannot be read."""
    try:
        with open("/proc/%d/environ" % pid, "rb"):
            pass
    except PermissionError:
        return None, "cannot read /proc/%d/environ (another user's process)" % pid
    except OSError as e:
        return None, "cannot read /proc/%d/environ: %s" % (pid, e.strerror or e)
    value = environment(pid).get("FLIGHTREC_OUTPUT", "")
    if not value:
        return DEFAULT_OUTPUT, None
    if not os.path.isabs(value):
        # Relative to where the process started; its current directory is the best guess.
        try:
            value = os.path.join(os.readlink("/proc/%d/cwd" % pid), value)
        except OSError:
            pass
    return value, None


def live_processes(output):
    """{pid: (service, directory)} of processes with an .active segment in
    `output` or one of its uid-N directories, and still alive. None if
    `output` cannot be read."""
    dirs = [output]
    try:
        dirs += [os.path.join(output, d) for d in sorted(os.listdir(output))
                 if re.match(r"^uid-\d+$", d) and os.path.isdir(os.path.join(output, d))]
    except OSError:
        return None
    found = {}
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            m = ACTIVE_NAME.match(name)
            if m and alive(int(m.group("pid"))):
                found[int(m.group("pid"))] = (m.group("service"), d)
    return found


def names_match(target, names):
    """target is one of names, as written or as file names write it."""
    return target in names or sanitized(target) in {sanitized(n) for n in names}


def matches(target, pid, service):
    return names_match(target, program_names(pid) | {service})


def all_pids():
    try:
        return sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
    except OSError:
        return []


def remove_stale_control_files(directory):
    """Our own control files nobody will consume: for a process that is gone
    or has another start time than the file names, older names (no start
    time, which no recorder obeys any more), half-written ones over a
    minute old."""
    me = os.geteuid()
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        m = CONTROL_NAME.match(name)
        if not m:
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid != me or not stat.S_ISREG(st.st_mode):
            continue
        pid = int(m.group("pid"))
        if m.group("tmp"):
            stale = st.st_mtime < time.time() - 60
        else:
            stale = m.group("start") is None or not alive(pid) or start_ticks(pid) != int(m.group("start"))
        if stale:
            try:
                os.unlink(path)
            except OSError:
                pass


def write_control_file(directory, pid, start, note):
    """Written under a temporary name, then renamed: the recorder never reads half a note."""
    final = os.path.join(directory, ".trigger-%d-%d" % (pid, start))
    # One another user planted under that name (a shared sticky directory)
    # would block the rename: the directory's owner may remove it.
    try:
        st = os.lstat(final)
        if st.st_uid != os.geteuid() and os.stat(directory).st_uid == os.geteuid():
            os.unlink(final)
    except OSError:
        pass
    tmp = "%s.%d.tmp" % (final, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (note.replace("\n", " ")[:200] + "\n").encode("utf-8", "replace"))
    finally:
        os.close(fd)
    try:
        os.rename(tmp, final)
    except OSError:
        os.unlink(tmp)
        raise
    return final


class Finder:
    """Live recording processes, by the directories they record into."""

    def __init__(self, output):
        self.output = output  # --output, or None: each process's own
        self.fallback = output or os.environ.get("FLIGHTREC_OUTPUT") or DEFAULT_OUTPUT
        self.cache = {}

    def live(self, directory):
        if directory not in self.cache:
            self.cache[directory] = live_processes(directory)
        return self.cache[directory] or {}

    def by_pid(self, pid):
        """(service, directory) of pid, or raises UsageError saying where it looked."""
        if self.output:
            directory, why = self.output, None
        else:
            directory, why = output_of(pid)
            if directory is None:
                directory = self.fallback
        found = self.live(directory).get(pid)
        if found:
            return found
        if not alive(pid):
            hint = ": no such process"
        else:
            hint = " (%s; give --output DIR)" % why if why else ""
        raise cli.UsageError("pid %d is not a live process recording into %s%s" % (pid, directory, hint))

    def by_service(self, target):
        """{pid: (service, directory)} of every live process target names."""
        dirs = [self.output] if self.output else [self.fallback]
        if not self.output:
            # Processes of that name (or FLIGHTREC_SERVICE) record wherever
            # their environment says.
            for pid in all_pids():
                if pid == os.getpid():
                    continue
                env = environment(pid)
                service = env.get("FLIGHTREC_SERVICE")
                if not names_match(target, program_names(pid) | ({service} if service else set())):
                    continue
                directory, _ = output_of(pid)
                if directory and directory not in dirs:
                    dirs.append(directory)
        chosen = {}
        for d in dirs:
            for pid, (service, directory) in self.live(d).items():
                if matches(target, pid, service):
                    chosen[pid] = (service, directory)
        return chosen, dirs


def run(args):
    finder = Finder(args.output)
    chosen = {}
    for target in args.targets:
        if target.isdigit():
            pid = int(target)
            chosen[pid] = finder.by_pid(pid)
        else:
            matched, dirs = finder.by_service(target)
            if not matched:
                raise cli.UsageError("no live process of service %r records into %s" % (target, ", ".join(dirs)))
            chosen.update(matched)
    me = os.geteuid()
    status = 0
    for pid, (service, directory) in sorted(chosen.items()):
        # The recorder obeys only its own user's and root's control files.
        owner = effective_uid(pid)
        if me != 0 and owner is not None and owner != me:
            cli.err("pid %d (%s) runs as uid %d: only that user or root can trigger it" % (pid, service, owner))
            status = 1
            continue
        start = start_ticks(pid)
        if start is None:
            cli.err("pid %d: cannot read /proc/%d/stat (gone?)" % (pid, pid))
            status = 1
            continue
        remove_stale_control_files(directory)
        try:
            path = write_control_file(directory, pid, start, args.note)
        except OSError as e:
            cli.err("pid %d: cannot write its control file in %s: %s" % (pid, directory, e.strerror or e))
            status = 1
            continue
        print("triggered pid %d (%s): %s" % (pid, service, path))
    return status
