"""trigger: asks live recorded processes to keep (and, with S3, ship) their
recent past, as if something had gone wrong now: an on-demand trigger.

    flightrec-dump trigger 4242            # one process
    flightrec-dump trigger redis-server    # every live process of that service

No signal is sent (the service may use every signal itself): a control file
`.trigger-PID` is written into the directory the process records into
(FLIGHTREC_OUTPUT, or its uid-N after a privilege drop). The recorder's
flush thread looks for it at most every 250 ms while it ticks (at least
once a second), removes it, and writes a `trigger` event with reason
`demand` and the --note text. Live processes are found from their `.active`
segments."""
import os
import re

from .. import cli

DEFAULT_OUTPUT = "/tmp/flightrec"
# <stamp>-<service>-<pid>-<seq>.active (preload/flush/segment_files.h)
ACTIVE_NAME = re.compile(r"^\d{8}T\d{6}(?:\.\d{3})?Z-(?P<service>[^-]+)-(?P<pid>\d+)-\d+\.active$")


def register(subparsers):
    p = subparsers.add_parser("trigger", help="keep a live process's recent past (an on-demand incident)")
    p.add_argument("targets", nargs="+", metavar="PID|SERVICE",
                   help="a process id, or a service name (every live process of it)")
    p.add_argument("--output", metavar="DIR", default=None,
                   help="the recorder's output directory (default: $FLIGHTREC_OUTPUT, else %s)" % DEFAULT_OUTPUT)
    p.add_argument("--note", default="", help="text recorded with the trigger (one line, at most 200 bytes)")
    p.set_defaults(func=run)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_processes(output):
    """{pid: (service, directory)} of processes with an .active segment in
    `output` or one of its uid-N directories, and still alive."""
    dirs = [output]
    try:
        dirs += [os.path.join(output, d) for d in sorted(os.listdir(output))
                 if re.match(r"^uid-\d+$", d) and os.path.isdir(os.path.join(output, d))]
    except OSError as e:
        raise cli.UsageError("cannot read %s: %s" % (output, e.strerror or e)) from None
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


def write_control_file(directory, pid, note):
    """Written under a temporary name, then renamed: the recorder never reads half a note."""
    final = os.path.join(directory, ".trigger-%d" % pid)
    tmp = "%s.%d.tmp" % (final, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (note.replace("\n", " ")[:200] + "\n").encode("utf-8", "replace"))
    finally:
        os.close(fd)
    os.rename(tmp, final)
    return final


def run(args):
    output = args.output or os.environ.get("FLIGHTREC_OUTPUT") or DEFAULT_OUTPUT
    procs = live_processes(output)
    chosen = {}
    for target in args.targets:
        if target.isdigit():
            pid = int(target)
            if pid not in procs:
                raise cli.UsageError("pid %d is not a live process recording into %s" % (pid, output))
            chosen[pid] = procs[pid]
        else:
            matched = {pid: p for pid, p in procs.items() if p[0] == target}
            if not matched:
                raise cli.UsageError("no live process of service %r records into %s" % (target, output))
            chosen.update(matched)
    status = 0
    for pid, (service, directory) in sorted(chosen.items()):
        try:
            path = write_control_file(directory, pid, args.note)
        except OSError as e:
            cli.err("pid %d: cannot write its control file in %s: %s" % (pid, directory, e.strerror or e))
            status = 1
            continue
        print("triggered pid %d (%s): %s" % (pid, service, path))
    return status
