"""requests_diff: the question people bring to a flight recorder — what do
the slow requests do that the typical ones do not? (`requests --diff`,
`diff --requests`.)

The slow group is every request at or above the 90th percentile of latency
(at least one); the typical group is the requests between the 25th and
75th percentiles. Each group's CPU and off-CPU samples are those taken on
the handling thread inside its requests' windows (attribution as in
request_samples.py), divided by the group's size: the table compares one slow
request with one typical request, function by function (diff.py), the
largest growth of self time first.
"""
import json
import sys
from array import array

from . import cli, diff, request_inference
from .request_samples import read_samples, window_entries
from .units import EXACT_TOTAL, Durations, format_ns, reset_exact_budget
from .request_inference import DURATION, PID, START, TID

KINDS = ("cpu", "offcpu")
TITLES = {"cpu": "CPU", "offcpu": "Off-CPU"}
SLOW_PCT = 90
TYPICAL = (25, 75)


class Group:
    """One side: its size and duration range, and its requests' windows per
    thread (16 bytes a request)."""

    def __init__(self):
        self.count = self.total = 0
        self.min = self.max = None
        self.windows = {}  # (pid, tid) -> array of lo, hi, lo, hi, ...

    def add(self, r):
        d = r[DURATION]
        self.count += 1
        self.total += d
        self.min = d if self.min is None or d < self.min else self.min
        self.max = d if self.max is None or d > self.max else self.max
        w = self.windows.get((r[PID], r[TID]))
        if w is None:
            w = self.windows[(r[PID], r[TID])] = array("q")
        w.append(r[START])
        w.append(r[START] + d)

    def stats(self):
        if not self.count:
            return {"count": 0}
        return {"count": self.count, "min_ns": self.min, "max_ns": self.max, "mean_ns": self.total // self.count}


def groups(trace, role):
    """(number of requests, slow group, typical group); the groups are empty
    when there are too few requests to compare. Two passes over the requests:
    their percentiles first (exact up to EXACT_TOTAL durations, then within
    0.8%: units.Durations), then the members."""
    reset_exact_budget()
    durations = Durations(limit=EXACT_TOTAL)
    for r in request_inference.iter_requests(trace, role):
        durations.add(r[DURATION])
    slow, typical = Group(), Group()
    if durations.count < 3:
        return durations.count, slow, typical
    slow_from, lo, hi = durations.percentiles((SLOW_PCT, TYPICAL[0], TYPICAL[1]))
    for r in request_inference.iter_requests(trace, role):
        d = r[DURATION]
        if d >= slow_from:
            slow.add(r)
        elif lo <= d <= hi:
            typical.add(r)
    return durations.count, slow, typical


def _entries(kind, group, samples, window_entries):
    """The group's (labels, samples, weight) entries, merged per call path."""
    merged = {}
    for key, w in group.windows.items():
        thread = samples[kind].get(key)
        if not thread:
            continue
        for i in range(0, len(w), 2):
            for labels, n, weight in window_entries(kind, thread, w[i], w[i + 1]):
                k = tuple(labels)
                m = merged.get(k)
                if m is None:
                    merged[k] = [n, weight]
                else:
                    m[0] += n
                    m[1] += weight
    return [(list(k), n, weight) for k, (n, weight) in merged.items()]


def diff_report(trace, role, as_json, limit, min_pct, groups_of=groups, read=read_samples):
    """Prints the slow-against-typical comparison; returns the exit status.
    groups_of(trace, role) gives (count, slow Group, typical Group) and
    read(trace, windows) the samples in the groups' windows: the file
    reader's by default; with --clickhouse the commands pass
    fleet_reports.diff_groups and fleet_reports.read_samples (percentiles and
    members from the database)."""
    total, slow, typical = groups_of(trace, role)
    doc = {"slow": slow.stats(), "typical": typical.stats(), "kinds": {}}
    if slow.count and typical.count:
        windows = {}
        for g in (slow, typical):
            for key, w in g.windows.items():
                windows.setdefault(key, []).extend(zip(w[::2], w[1::2]))
        samples = read(trace, windows)
        del windows
        for kind in KINDS:
            a = diff.Side(_entries(kind, typical, samples, window_entries), per=typical.count,
                          label="typical")
            b = diff.Side(_entries(kind, slow, samples, window_entries), per=slow.count,
                          label="slow")
            if not a.entries and not b.entries:
                continue
            rows = diff.function_rows(a, b, order="value")
            rows = [r for r in rows if max(r["a_total_pct"], r["b_total_pct"]) >= min_pct]
            doc["kinds"][kind] = {"typical_samples": a.samples, "slow_samples": b.samples,
                                  "typical_ns_per_request": a.weight / a.per,
                                  "slow_ns_per_request": b.weight / b.per,
                                  "functions": rows if limit is None else rows[:limit]}
    if as_json:
        sys.stdout.write(json.dumps(doc) + "\n")
        return cli.exit_status(trace)
    if not slow.count or not typical.count:
        print("too few requests to compare slow with typical ones (%d request%s; see `requests`)" % (
            total, "" if total == 1 else "s"))
        return cli.exit_status(trace)
    s, t = doc["slow"], doc["typical"]
    print("slow: %d request%s at or above p%d (%s .. %s, mean %s)" % (
        s["count"], "" if s["count"] == 1 else "s", SLOW_PCT, format_ns(s["min_ns"]), format_ns(s["max_ns"]),
        format_ns(s["mean_ns"])))
    print("typical: %d requests between p%d and p%d (%s .. %s, mean %s)" % (
        t["count"], TYPICAL[0], TYPICAL[1], format_ns(t["min_ns"]), format_ns(t["max_ns"]), format_ns(t["mean_ns"])))
    print("per request, on the handling thread; the largest growth of self time first")
    if not doc["kinds"]:
        print("\nno CPU or off-CPU samples inside these requests")
    shown_limit = 20 if limit is None else limit
    for kind, k in doc["kinds"].items():
        print()
        print("%s: typical %s, slow %s per request" % (TITLES[kind], format_ns(k["typical_ns_per_request"]),
                                                      format_ns(k["slow_ns_per_request"])))
        table = [("typical self", "slow self", "Δ self", "typical total", "slow total", "Δ total", "function")]
        for r in k["functions"][:shown_limit]:
            table.append((format_ns(r["a_self"]), format_ns(r["b_self"]), _signed(r["delta_self"]),
                          format_ns(r["a_total"]), format_ns(r["b_total"]), _signed(r["delta_total"]),
                          r["function"]))
        widths = [max(len(row[i]) for row in table) for i in range(6)]
        for row in table:
            print("  " + "  ".join(row[i].rjust(widths[i]) for i in range(6)) + "  " + row[6])
    return cli.exit_status(trace)


def _signed(ns):
    return ("+" if ns >= 0 else "-") + format_ns(abs(ns))
