"""cli: flightrec-dump's command line: discovers cmd_*.py subcommands, runs
one, and turns every failure into one clear stderr line (never a traceback).

Exit status: 0 ok; 1 some input was missing, unreadable, not a segment or
damaged (whatever could be read was still shown); 2 usage error; 130
interrupted. A closed stdout (| head) ends quietly with status 0."""
import argparse
import atexit
import importlib
import os
import pkgutil
import re
import shutil
import sys
import traceback

from . import progress, report_scope, selection
from .units import format_bytes, format_seconds, format_wall  # noqa: F401  (commands call them as cli.format_*)
from .fleet_db import FleetError
from .trace import Trace

PROG = "flightrec-dump"


class UsageError(Exception):
    """A bad request (unknown type, bad option value): one stderr line, exit 2."""


# Text output escapes what a terminal would obey rather than show: C0 controls
# but tab and newline, DEL, C1 controls, and the bidirectional overrides that
# reorder what is shown. Thread and function names come from the recorded
# program (or whoever wrote the file); `\x1b]0;...` must not retitle the
# operator's terminal. JSON output is escaped the JSON way (`\u001b`), which
# decodes to the same string.
_TERMINAL_UNSAFE = [c for c in range(0x20) if c not in (0x09, 0x0A)] + list(range(0x7F, 0xA0)) \
    + list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A))
_TEXT_ESCAPES = {c: "\\x%02x" % c if c < 0x100 else "\\u%04x" % c for c in _TERMINAL_UNSAFE}
_JSON_ESCAPES = {c: "\\u%04x" % c for c in _TERMINAL_UNSAFE}
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_ASCII_SAFE = bytes([0x09, 0x0A] + list(range(0x20, 0x7F)))


def _needs_escape(text):
    # ASCII text (nearly all output): a C-speed byte scan; other text: the regex.
    if text.isascii():
        return bool(text.encode("ascii").translate(None, _ASCII_SAFE))
    return _UNSAFE.search(text) is not None


def escape_text(text, json_mode=False):
    """text with terminal control characters written as escapes."""
    return text.translate(_JSON_ESCAPES if json_mode else _TEXT_ESCAPES)


class EscapingStream:
    """A text stream that escapes terminal control characters on the way
    through (everything else is the wrapped stream's)."""

    def __init__(self, stream, json_mode=False):
        self._stream = stream
        self._table = _JSON_ESCAPES if json_mode else _TEXT_ESCAPES

    def write(self, text):
        if _needs_escape(text):  # rare: the common case writes through untouched
            text = text.translate(self._table)
        return self._stream.write(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def err(message):
    print("%s: %s" % (PROG, escape_text(message)), file=sys.stderr, flush=True)


# Files that already have their stderr line in this run: a bad file gets one
# clear line, however many of its problems come to light (at open time or
# later, when a report finds it cannot use some of its events).
_files_reported = set()


def err_file(path, message):
    """`path: message` on stderr, unless this file already has its line."""
    if path in _files_reported:
        return
    _files_reported.add(path)
    err("%s: %s" % (path, message))


def add_paths_argument(parser):
    """PATH... plus the options every report takes (selection.py: --pid,
    --service, --host, --full-names)."""
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="segment files (*.seg, *.active), directories holding them, or s3://bucket/prefix")
    selection.add_arguments(parser)
    group = parser.add_argument_group("fleet (docs/FLEET.md)")
    group.add_argument("--clickhouse", metavar="URL",
                       help="read the segments loaded into ClickHouse (flightrec-dump load) instead of PATHs: "
                            "clickhouse://[user[:password]@]host[:port][/database]")
    group.add_argument("--cluster", metavar="NAME",
                       help="with --clickhouse: query the Distributed tables over cluster NAME")
    parser.add_argument("--incident", type=int, metavar="N",
                        help="only incident N (as `info` numbers them): its process's segments around it")


# The selection (--pid/--service/--host) of the command being run: set by
# main() from its arguments, applied by every open_trace of the run.
_selection = selection.Selection()
# --incident N of the command being run (main sets it; open_trace applies it).
_incident = None


def _fetch_remote(paths):
    """s3://bucket/prefix paths are downloaded (flightrec_lib.s3_source) into
    temporary directories removed at exit. Returns (local paths, errors)."""
    local, errors = [], []
    for path in paths:
        if not path.startswith("s3://"):
            local.append(path)
            continue
        from . import s3_progress, s3_source  # botocore only when asked for
        shown = progress.Progress("downloading %s" % path)
        client = None
        try:
            bucket, _ = s3_source.parse_s3_url(path)
            client = s3_progress.ProgressClient(s3_source.make_client(bucket), _selection, shown)
            tmp = s3_source.download_to_temp(path, client=client)
        except s3_source.S3SourceError as e:
            message = str(e)  # usually names the URL already
            message = message[len(path) + 2:] if message.startswith(path + ": ") else message
            if client is not None and client.skipped and message.startswith("no segments"):
                message = "no segments under this prefix match %s (%d others skipped)" % (
                    _selection.describe(), client.skipped)
            errors.append((path, message))
            continue
        finally:
            shown.done()
        atexit.register(shutil.rmtree, tmp, True)
        local.append(tmp)
    return local, errors


# --clickhouse of the command being run (a fleet_db.Target; main sets it):
# open_trace then returns the fleet database (fleet_profiles.FleetTrace).
_fleet = None
_command = None


def open_trace(paths):
    """Opens a Trace and reports, one stderr line per file, what could not be
    read: missing/unreadable files, non-segments, damaged blocks. Paths may
    also be s3://bucket/prefix URLs (segments the uploader shipped)."""
    if _fleet is not None:
        from . import fleet_profiles
        trace = fleet_profiles.FleetTrace(_fleet, _selection)
        trace.merge_threads = _command in fleet_profiles.PATH_ONLY_COMMANDS
        if _selection and not trace.segments and trace.skipped:
            err("no segments match %s (%d processes skipped)" % (_selection.describe(), trace.skipped))
        if _incident is not None:
            from . import fleet_incidents, incidents
            try:
                fleet_incidents.select(trace, _incident)
            except incidents.IncidentError as e:
                raise UsageError(str(e)) from None
        return trace
    local, remote_errors = _fetch_remote(paths)
    trace = SelectedTrace(local, _selection)
    trace.errors[:0] = remote_errors
    if _selection and not trace.segments and trace.skipped:
        err("no segments match %s (%d segments skipped)" % (_selection.describe(), trace.skipped))
    for path, message in trace.errors:
        err_file(path, message)
    if _incident is not None:
        from . import incidents
        try:
            incidents.select(trace, _incident)
        except incidents.IncidentError as e:
            raise UsageError(str(e)) from None
    report_damage(trace)
    return trace


class SelectedTrace(Trace):
    """A Trace of the segments the selection takes, read with a progress line
    on a terminal. Segments ruled out are dropped as soon as their header is
    read; trace.skipped counts them."""

    def __init__(self, paths, chosen):
        self._chosen = chosen
        self._progress = None
        self.skipped = 0
        super().__init__(paths)
        if self._progress is not None:
            self._progress.done()

    def _expand(self, paths):
        found = list(super()._expand(paths))
        self._progress = progress.Progress("reading segments", total=len(found))
        return found

    def _open(self, path, follow=True):
        # Trace._open calls itself once for a file sealed while being listed: count it once.
        self._depth = getattr(self, "_depth", 0) + 1
        before = len(self.segments)
        try:
            super()._open(path, follow)
        finally:
            self._depth -= 1
        if self._depth:
            return
        if len(self.segments) > before:
            seg = self.segments[-1]
            if self._chosen and not self._chosen.matches(seg.header):
                self.segments.pop()
                self.skipped += 1
            if self._progress is not None:
                self._progress.advance(nbytes=getattr(seg, "size", 0) or 0)
        elif self._progress is not None:
            self._progress.advance()


def damage_lines(trace):
    """(path, message) per damaged segment: how many blocks were bad and the
    first problem, or else the first event type whose layout cannot be used."""
    out = []
    for seg in trace.segments:
        if seg.bad_blocks:
            first = next((m for _, m in seg.problems), "")
            out.append((seg.path, "%d damaged block%s skipped (%s); the rest was read" % (
                seg.bad_blocks, "" if seg.bad_blocks == 1 else "s", first)))
        elif seg.unusable_types:
            first = next(m for _, m in seg.problems if "fields of unexpected types" in m)
            out.append((seg.path, first))
    return out


def report_damage(trace):
    """One stderr line per damaged segment (damage_lines)."""
    for path, message in damage_lines(trace):
        err_file(path, message)


def exit_status(trace):
    return 1 if trace.errors or any(s.bad_blocks or s.unusable_types for s in trace.segments) else 0


def _discover(subparsers):
    pkg_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "commands")
    for mod in sorted(pkgutil.iter_modules([pkg_dir]), key=lambda m: m.name):
        if not mod.name.startswith("cmd_"):
            continue
        try:
            module = importlib.import_module("%s.commands.%s" % (__package__, mod.name))
            module.register(subparsers)
        except Exception as e:  # a broken plug-in must not take the others down
            err("plug-in %s.py failed to load: %s: %s" % (mod.name, type(e).__name__, e))


def build_parser():
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Read flightrec segments (files or directories). "
                    "With only paths, runs `info`.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _discover(subparsers)
    return parser, subparsers


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    _files_reported.clear()
    try:
        parser, subparsers = build_parser()
        # `flightrec-dump DIR` means `flightrec-dump info DIR`.
        if argv and not argv[0].startswith("-") and argv[0] not in subparsers.choices \
                and "info" in subparsers.choices and (os.path.exists(argv[0]) or argv[0].startswith("s3://")):
            argv.insert(0, "info")
        args = parser.parse_args(argv)
        global _incident
        _incident = getattr(args, "incident", None)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return 2
        global _selection, _fleet
        try:
            _selection = selection.apply_args(args)
        except selection.SelectionError as e:
            raise UsageError(str(e)) from None
        global _command
        _command = args.command
        _apply_since(args)
        _fleet = None
        if hasattr(args, "paths") and hasattr(args, "clickhouse") and args.command != "load":
            _fleet = _fleet_target(args)
        saved = sys.stdout
        sys.stdout = EscapingStream(saved, bool(getattr(args, "json", False)))
        try:
            status = args.func(args)
            sys.stdout.flush()
        finally:
            sys.stdout = saved
        return int(status or 0)
    except UsageError as e:
        err(str(e))
        return 2
    except FleetError as e:  # --clickhouse: server down, query refused (one line, no credentials)
        err(str(e))
        return 4
    except BrokenPipeError:
        # The reader went away (| head): not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not fail again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except Exception as e:
        if os.environ.get("FLIGHTREC_DUMP_DEBUG"):
            traceback.print_exc()
        err("internal error: %s: %s (set FLIGHTREC_DUMP_DEBUG=1 for details)" % (type(e).__name__, e))
        return 3


def _apply_since(args):
    """--since DURATION: --from at now minus DURATION (an absolute time)."""
    since = getattr(args, "since", None)
    if since is None:
        return
    if getattr(args, "t_from", None) is not None:
        raise UsageError("give --since or --from, not both")
    import time
    try:
        ns, from_end = report_scope.parse_time(since)
    except report_scope.ProfileError as e:
        raise UsageError(str(e)) from None
    if from_end or ns <= 0:
        raise UsageError("--since takes a positive duration, e.g. 30m, 2h, 1d")
    t = time.time_ns() - ns
    args.t_from = "%s.%09dZ" % (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t // 10 ** 9)), t % 10 ** 9)


def _fleet_target(args):
    """The fleet_db.Target of --clickhouse (None without it); PATHs are
    required without it and refused with it."""
    if args.clickhouse is None:
        if args.cluster:
            raise UsageError("--cluster needs --clickhouse URL")
        if not args.paths:
            raise UsageError("%s: give segment PATHs (or --clickhouse URL)" % args.command)
        return None
    if args.paths:
        raise UsageError("give either PATHs or --clickhouse URL, not both")
    from . import fleet_db
    try:
        target = fleet_db.Target(args.clickhouse, args.cluster)
    except fleet_db.FleetError as e:
        raise UsageError(str(e)) from None
    args.paths = [target.shown]
    return target
