"""selection: the options every report takes besides its paths — which
processes to read (--pid, --service, --host) and how to name functions
(--full-names).

A fleet's bucket holds segments of many hosts, services and processes
(s3://bucket/prefix/{service}/{date}/{host}/{service}-{pid}-{seq}.seg, as
the uploader names them); these filters narrow any report to some of them.
Each segment's header says its service, host and pid, so the filters hold
for local directories too. For s3:// the key already says service, host and
pid, so segments ruled out are not even downloaded (key_may_match); the
header check after reading stays the one that decides.
"""
import fnmatch
import re

from . import names


class SelectionError(Exception):
    """A malformed filter value: one line for the user."""


def add_arguments(parser):
    group = parser.add_argument_group("selection (any report)")
    group.add_argument("--pid", metavar="PID[,PID...]", action="append",
                       help="only these processes (repeatable)")
    group.add_argument("--service", metavar="NAME", action="append",
                       help="only segments of this service (FLIGHTREC_SERVICE; shell wildcards; repeatable)")
    group.add_argument("--host", metavar="NAME", action="append",
                       help="only segments recorded on this host (shell wildcards; repeatable)")
    group.add_argument("--full-names", action="store_true",
                       help="show function names in full (parameters, template arguments) "
                            "instead of the short form")


class Selection:
    """Which segments a report reads. An empty selection takes everything."""

    def __init__(self, pids=None, services=None, hosts=None):
        self.pids = set(pids) if pids else None
        self.services = list(services) if services else None
        self.hosts = list(hosts) if hosts else None

    @classmethod
    def from_args(cls, args):
        pids = set()
        for spec in getattr(args, "pid", None) or ():
            for part in spec.split(","):
                part = part.strip()
                if not part.isdigit():
                    raise SelectionError("bad --pid %r: use process ids, e.g. --pid 1234 or --pid 12,34" % spec)
                pids.add(int(part))
        return cls(pids, getattr(args, "service", None), getattr(args, "host", None))

    def __bool__(self):
        return bool(self.pids or self.services or self.hosts)

    def matches(self, header):
        """True if a segment with this header (service, host, pid) is selected."""
        if self.pids is not None and header.get("pid") not in self.pids:
            return False
        if self.services is not None and not _any_match(header.get("service") or "", self.services):
            return False
        if self.hosts is not None and not _any_match(header.get("host") or "", self.hosts):
            return False
        return True

    def key_may_match(self, key):
        """False only when an S3 key in the uploader's layout
        ({service}/{yyyy-mm-dd}/{host}/{stamp}-{service}-{pid}-{seq}.seg) names
        a service, host or pid the selection rules out; keys in any other
        layout pass (their headers decide once read)."""
        parts = key.split("/")
        if len(parts) < 4 or not _DATE.match(parts[-3]):
            return True
        m = _SEGMENT_NAME.search(parts[-1])
        if not m:
            return True
        service, host, pid = parts[-4], parts[-2], int(m.group(1))
        if self.pids is not None and pid not in self.pids:
            return False
        # The uploader writes '/' and '\\' in names as '_': compare the same way.
        if self.services is not None and not _any_match(service, [_key_safe(p) for p in self.services]):
            return False
        if self.hosts is not None and not _any_match(host, [_key_safe(p) for p in self.hosts]):
            return False
        return True

    def describe(self):
        said = []
        if self.pids:
            said.append("pid " + ",".join(str(p) for p in sorted(self.pids)))
        if self.services:
            said.append("service " + ",".join(self.services))
        if self.hosts:
            said.append("host " + ",".join(self.hosts))
        return ", ".join(said)


_SEGMENT_NAME = re.compile(r"-(\d+)-(\d+)\.seg$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _key_safe(pattern):
    return pattern.replace("/", "_").replace("\\", "_")


def _any_match(value, patterns):
    return any(value == p or fnmatch.fnmatchcase(value, p) for p in patterns)


def apply_args(args):
    """Sets the naming mode from the command line; returns its Selection."""
    names.set_full(getattr(args, "full_names", False))
    return Selection.from_args(args)
