"""viewer_sources: what `flightrec-dump serve` reads, and nothing else — the
paths (files, directories), the one s3://bucket/prefix or the one
ClickHouse database (--clickhouse URL, segments `load` put there) given on
its command line. The browser never names a file: it names a selection
(service, host, pid, incident, and for S3 a key prefix under the given
one), and this module maps it to the segments of those sources.

* catalog(): the processes the sources hold (service, host, pid), with their
  segments, time range, size, damage and drop counts; for S3 the listing
  under a prefix (sub-prefixes to browse, processes from the keys' names)
  without downloading anything.
* open(): a Trace of one selection, read the way the reports read it
  (cli.SelectedTrace), kept for the next views (a few at a time). A
  selection larger than max_bytes is refused with a message (TooBig)
  before anything is read or downloaded. From ClickHouse: the reports'
  fleet_profiles.FleetTrace of the selection (the database aggregates; its
  size is not the viewer's memory, so max_bytes does not apply), an
  incident picked by fleet_incidents.select as `--incident N --clickhouse`
  picks it.

The sources are fixed when the server starts: a path or key outside them
cannot be reached through a selection.
"""
import collections
import copy
import shutil

from . import cli, incidents, progress, selection
from .commands import cmd_info


class SourceError(Exception):
    """One line the page shows: a source could not be read (S3 unreachable,
    no such incident, a bad selection)."""


class TooBig(SourceError):
    """The selection holds more segment bytes than the viewer reads at once."""


# Traces kept open for the next views: the selection a person is looking at
# and the one before it (a compare view holds two).
KEEP_TRACES = 3
# Keys listed under one S3 prefix before the listing stops (it says so).
S3_LIST_LIMIT = 20000


class Selection(selection.Selection):
    """selection.Selection plus what the viewer's URLs add: an incident
    number and (S3) a key prefix below the source's."""

    def __init__(self, pids=None, services=None, hosts=None, incident=None, prefix=""):
        super().__init__(pids, services, hosts)
        self.incident = incident
        self.prefix = prefix or ""

    def key(self):
        return (tuple(sorted(self.pids or ())), tuple(self.services or ()), tuple(self.hosts or ()),
                self.incident, self.prefix)


class Sources:
    def __init__(self, paths, max_bytes, fleet=None):
        """fleet: a fleet_db.Target (serve --clickhouse URL), in place of paths."""
        remote = [p for p in paths if p.startswith("s3://")]
        if remote and len(paths) > 1:
            raise SourceError("serve takes local paths or one s3://bucket/prefix, not both")
        if fleet is not None and paths:
            raise SourceError("serve takes PATHs or --clickhouse URL, not both")
        self.fleet = fleet
        self.paths = list(paths)
        self.s3_url = remote[0] if remote else None
        self.max_bytes = max_bytes
        self._traces = collections.OrderedDict()  # Selection.key() -> Trace
        self._catalog = None                      # local: (cmd_info document, {path: segment row})
        self._tmpdirs = []

    def describe(self):
        if self.fleet is not None:
            return self.fleet.shown + (" (cluster %s)" % self.fleet.cluster if self.fleet.cluster else "")
        return self.s3_url or ", ".join(self.paths)

    def close(self):
        for d in self._tmpdirs:
            shutil.rmtree(d, True)
        self._tmpdirs = []
        self._traces.clear()

    # ------------------------------------------------------------ catalog

    def catalog(self, prefix=""):
        """{"processes": [...], "segments": n, "bytes": n, "errors": [...],
        "incidents": [...], "crashes": n, "folders": [...] (S3), "note"}."""
        if self.s3_url:
            return self._s3_catalog(prefix)
        if self.fleet is not None:
            return self._fleet_catalog()
        doc = self._local_info()
        procs = {}
        for s in doc["segments"]:
            key = (s["service"], s["host"], s["pid"])
            p = procs.get(key)
            if p is None:
                p = procs[key] = {"service": s["service"], "host": s["host"], "pid": s["pid"], "segments": 0,
                                  "bytes": 0, "events": 0, "first_wall_ns": None, "last_wall_ns": None,
                                  "bad_blocks": 0, "dropped": {}, "_paths": []}
            p["segments"] += 1
            p["bytes"] += s["size"]
            p["events"] += s["events"]
            p["bad_blocks"] += s["bad_blocks"]
            p["_paths"].append(s["path"])
            if s["first_wall_ns"] is not None:
                last = s["first_wall_ns"] + (s["last_time_ns"] - s["first_time_ns"])
                p["first_wall_ns"] = min(p["first_wall_ns"] or s["first_wall_ns"], s["first_wall_ns"])
                p["last_wall_ns"] = max(p["last_wall_ns"] or last, last)
        trace = self._catalog[1]
        for p in procs.values():
            sub = copy.copy(trace)  # Trace.dropped() reads only .segments
            paths = set(p.pop("_paths"))
            sub.segments = [seg for seg in trace.segments if seg.path in paths]
            p["dropped"] = dict(sorted(sub.dropped().items()))
        return {"processes": sorted(procs.values(), key=lambda p: (p["service"] or "", p["host"] or "", p["pid"])),
                "segments": len(doc["segments"]), "bytes": sum(s["size"] for s in doc["segments"]),
                "errors": doc["errors"] + [{"path": p, "error": m} for p, m in cli.damage_lines(trace)],
                "incidents": doc["incidents"], "crashes": len(doc["crashes"]), "folders": [],
                "time_range": doc["time_range"], "note": None}

    def _local_info(self):
        if self._catalog is None:
            trace = cli.SelectedTrace(self.paths, selection.Selection())
            self._catalog = (cmd_info.summarize(trace), trace)
        return self._catalog[0]

    def _fleet_catalog(self):
        """The processes loaded into the database, from its ledger and tables,
        with their crashes and incidents (fleet_reports.info_document, what
        `info --clickhouse` prints)."""
        from . import fleet_profiles, fleet_reports
        trace = fleet_profiles.FleetTrace(self.fleet, selection.Selection())
        fleet_reports.check_loaded_by_this_version(trace)
        doc = fleet_reports.info_document(trace)
        procs = {}
        for s in doc["segments"]:
            key = (s["service"], s["host"], s["pid"])
            p = procs.get(key)
            if p is None:
                p = procs[key] = {"service": s["service"], "host": s["host"], "pid": s["pid"], "segments": 0,
                                  "bytes": 0, "events": 0, "first_wall_ns": None, "last_wall_ns": None,
                                  "bad_blocks": 0, "dropped": {}}
            p["segments"] += 1
            p["bytes"] += s.get("size") or 0
            p["events"] += s.get("events") or 0
            p["bad_blocks"] += s.get("bad_blocks") or 0
            if s.get("first_wall_ns") is not None:
                last = s["first_wall_ns"] + (s["last_time_ns"] - s["first_time_ns"])
                p["first_wall_ns"] = min(p["first_wall_ns"] or s["first_wall_ns"], s["first_wall_ns"])
                p["last_wall_ns"] = max(p["last_wall_ns"] or last, last)
        for (service, host, pid), p in procs.items():
            sub = copy.copy(trace)  # FleetTrace.dropped() reads only .procs
            sub.procs = {k: v for k, v in trace.procs.items() if v == (host, service, pid)}
            p["dropped"] = dict(sorted(sub.dropped().items()))
        return {"processes": sorted(procs.values(), key=lambda p: (p["service"] or "", p["host"] or "", p["pid"])),
                "segments": len(doc["segments"]), "bytes": sum(s.get("size") or 0 for s in doc["segments"]),
                "errors": [], "incidents": doc["incidents"], "crashes": len(doc["crashes"]), "folders": [],
                "time_range": doc["time_range"],
                "note": "from ClickHouse: the segments `flightrec-dump load` put there"}

    def _s3_catalog(self, prefix):
        from . import s3_source
        bucket, base = s3_source.parse_s3_url(self.s3_url)
        full = self._s3_prefix(prefix)
        try:
            client = s3_source.make_client(bucket)
            from botocore.exceptions import BotoCoreError, ClientError
        except s3_source.S3SourceError as e:
            raise SourceError(str(e)) from None
        folders, procs, listed, truncated = [], {}, 0, False
        try:
            # Sub-prefixes one level down, to browse by.
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=full, Delimiter="/")
            for page in pages:
                folders.extend(c["Prefix"][len(base):] for c in page.get("CommonPrefixes", []))
            # Every segment key below, grouped by the process its name says (no download).
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=full):
                for o in page.get("Contents", []):
                    if not o["Key"].endswith(".seg"):
                        continue
                    listed += 1
                    if listed > S3_LIST_LIMIT:
                        truncated = True
                        break
                    who = key_process(o["Key"])
                    p = procs.get(who)
                    if p is None:
                        p = procs[who] = {"service": who[0], "host": who[1], "pid": who[2], "segments": 0,
                                          "bytes": 0, "events": None, "first_wall_ns": None,
                                          "last_wall_ns": None, "bad_blocks": None, "dropped": None,
                                          "first_key": o["Key"], "last_key": o["Key"]}
                    p["segments"] += 1
                    p["bytes"] += int(o.get("Size") or 0)
                    modified = o.get("LastModified")
                    if modified is not None:
                        ns = int(modified.timestamp() * 1e9)
                        p["first_wall_ns"] = min(p["first_wall_ns"] or ns, ns)
                        p["last_wall_ns"] = max(p["last_wall_ns"] or ns, ns)
                if truncated:
                    break
        except (BotoCoreError, ClientError) as e:
            raise SourceError("s3://%s/%s: %s" % (bucket, full, s3_source._describe(e))) from None
        note = "times are the objects' upload times; open a process for its events, drops and damage"
        if truncated:
            note = "more than %d segments under this prefix: listing stopped; browse a sub-prefix. " % \
                S3_LIST_LIMIT + note
        return {"processes": sorted(procs.values(), key=lambda p: (p["service"] or "", p["host"] or "",
                                                                   p["pid"] or 0)),
                "segments": listed, "bytes": sum(p["bytes"] for p in procs.values()), "errors": [],
                "incidents": [], "crashes": None, "folders": folders, "time_range": None, "note": note,
                "prefix": full}

    def _s3_prefix(self, prefix):
        """The key prefix of a selection: the source's, extended by the URL's."""
        from . import s3_source
        _, base = s3_source.parse_s3_url(self.s3_url)
        prefix = prefix or ""
        if prefix.startswith("/") or "\\" in prefix or any(part == ".." for part in prefix.split("/")):
            raise SourceError("bad prefix %r: a key prefix below %s" % (prefix, self.s3_url))
        return base + prefix

    # ------------------------------------------------------------ opening

    def open(self, chosen):
        """The Trace of a selection (cached). Raises SourceError / TooBig."""
        key = chosen.key()
        trace = self._traces.get(key)
        if trace is not None:
            self._traces.move_to_end(key)
            return trace
        if self.fleet is not None:
            return self._fleet_open(chosen, key)
        if self.s3_url:
            paths = [self._s3_download(chosen)]
        else:
            info = self._local_info()
            rows = [s for s in info["segments"] if chosen.matches(s)]
            size = sum(s["size"] for s in rows)
            self._check_size(size, len(rows))
            paths = [s["path"] for s in rows]
            if not paths:
                raise SourceError("no segments match %s" % (chosen.describe() or "this selection"))
        trace = cli.SelectedTrace(paths, chosen)
        if not self.s3_url:
            # Files that are no segment at all belong to no selection: every view names them.
            trace.errors[:0] = [e for e in self._catalog[1].errors if e not in trace.errors]
        return self._keep(trace, chosen, key, incidents.select)

    def _fleet_open(self, chosen, key):
        from . import fleet_incidents, fleet_profiles
        trace = fleet_profiles.FleetTrace(self.fleet, chosen)
        if not trace.segments:
            raise SourceError("no processes in %s match %s" % (self.describe(), chosen.describe() or
                                                               "this selection"))
        # the segments of the incident's span, picked as `--incident N --clickhouse` picks them
        return self._keep(trace, chosen, key, fleet_incidents.select)

    def _keep(self, trace, chosen, key, select_incident):
        """The opened trace, narrowed to the chosen incident (the reports'
        own selection for its source), kept in the bounded cache."""
        if chosen.incident is not None:
            try:
                select_incident(trace, chosen.incident)
            except incidents.IncidentError as e:
                raise SourceError(str(e).replace("--incident", "incident")) from None
        self._traces[key] = trace
        while len(self._traces) > KEEP_TRACES:
            self._traces.popitem(last=False)
        return trace

    def _check_size(self, size, count):
        if size > self.max_bytes:
            raise TooBig("this selection holds %s in %d segment%s, more than the viewer reads at once "
                         "(%s, serve --max-mb): narrow it by service, host, pid or incident" % (
                             cli.format_bytes(size), count, "" if count == 1 else "s",
                             cli.format_bytes(self.max_bytes)))

    def _s3_download(self, chosen):
        from . import s3_progress, s3_source
        full = self._s3_prefix(chosen.prefix)
        bucket, base = s3_source.parse_s3_url(self.s3_url)
        url = "s3://%s/%s" % (bucket, full)
        try:
            client = s3_source.make_client(bucket)
            from botocore.exceptions import BotoCoreError, ClientError
            # Sizes first, from the listing: a selection too large is refused
            # before anything is downloaded.
            size = count = 0
            try:
                for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=full):
                    for o in page.get("Contents", []):
                        if o["Key"].endswith(".seg") and (not chosen or chosen.key_may_match(o["Key"])):
                            size += int(o.get("Size") or 0)
                            count += 1
            except (BotoCoreError, ClientError) as e:
                raise SourceError("%s: %s" % (url, s3_source._describe(e))) from None
            self._check_size(size, count)
            shown = progress.Progress("downloading %s" % url)
            try:
                tmp = s3_source.download_to_temp(url, client=s3_progress.ProgressClient(client, chosen, shown))
            finally:
                shown.done()
        except s3_source.S3SourceError as e:
            raise SourceError(str(e)) from None
        self._tmpdirs.append(tmp)
        return tmp


def key_process(key):
    """(service, host, pid) an uploaded key's name says
    ({service}/{yyyy-mm-dd}/{host}/{stamp}-{service}-{pid}-{seq}.seg), or
    (None, None, None) for a key in another layout."""
    parts = key.split("/")
    if len(parts) < 4 or not selection._DATE.match(parts[-3]):
        return (None, None, None)
    m = selection._SEGMENT_NAME.search(parts[-1])
    if not m:
        return (None, None, None)
    return (parts[-4], parts[-2], int(m.group(1)))

