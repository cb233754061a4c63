"""units: how the reports write numbers and summarize durations — times
(format_ns, format_seconds, format_wall), sizes (format_bytes), and latency
statistics (percentile, Durations: exact up to a memory cap, then a
histogram within 0.8%).

Shared by every report that prints latencies or sizes (sockets, requests,
requests --diff, info, heap) so no command imports another for them.
"""
import math
from array import array


def percentile(sorted_values, pct):
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, int(math.ceil(pct / 100.0 * len(sorted_values))))
    return sorted_values[rank - 1]


# Durations kept exactly per connection, and over all connections; past
# either a connection's durations go into a log-bucketed histogram (issue 29:
# memory must not grow with the socket calls of the trace).
EXACT_PER_CONN = 100_000
EXACT_TOTAL = 2_000_000  # 16 MiB of durations (array of 8-byte ints)
MANTISSA_BITS = 7        # bucket width <= 1/128 of its values: error < 0.8%
_exact_total = [0]


def reset_exact_budget():
    """A command starts with all of EXACT_TOTAL to share among its Durations."""
    _exact_total[0] = 0


class Durations:
    """A connection's blocking-call durations: exact (an array) until the
    caps above, then a histogram of buckets 2^-7 wide relative to their
    values (values under 128 ns stay exact); percentiles from it are the
    middle of their bucket, within 0.8% of the exact ones. count and max
    stay exact."""
    __slots__ = ("exact", "hist", "count", "max", "limit")

    def __init__(self, limit=EXACT_PER_CONN):
        self.exact = array("q")
        self.hist = None
        self.count = 0
        self.max = None
        self.limit = limit  # exact values kept by this one (EXACT_TOTAL bounds them all)

    def add(self, d):
        self.count += 1
        if self.max is None or d > self.max:
            self.max = d
        if self.hist is None:
            self.exact.append(d)
            _exact_total[0] += 1
            if len(self.exact) < self.limit and _exact_total[0] < EXACT_TOTAL:
                return
            self.hist = {}
            _exact_total[0] -= len(self.exact)
            for v in self.exact:
                self._bucket(v)
            self.exact = None
            return
        self._bucket(d)

    def _bucket(self, d):
        e = d.bit_length() - MANTISSA_BITS
        k = (e, d >> e) if e > 0 else (0, d)
        h = self.hist
        h[k] = h.get(k, 0) + 1

    def _hist_percentile(self, pct, ordered):
        rank = max(1, int(math.ceil(pct / 100.0 * self.count)))
        seen = 0
        for (e, m), n in ordered:
            seen += n
            if seen >= rank:
                return (m << e) + ((1 << e) >> 1) if e > 0 else m
        return self.max

    def percentiles(self, pcts):
        """[nearest-rank percentile] for each of pcts (None when empty)."""
        if not self.count:
            return [None] * len(pcts)
        if self.hist is None:
            d = sorted(self.exact)
            return [percentile(d, p) for p in pcts]
        ordered = sorted(self.hist.items())
        return [min(self._hist_percentile(p, ordered), self.max) for p in pcts]

    def summary(self):
        if not self.count:
            return None
        p50, p90, p99 = self.percentiles((50, 90, 99))
        out = {"count": self.count, "p50": p50, "p90": p90, "p99": p99, "max": self.max}
        if self.hist is not None:
            out["approximate"] = True  # percentiles within 0.8% (a histogram past the exact caps)
        return out


def latency_summary(durations):
    acc = Durations()
    for d in durations:
        acc.add(d)
    return acc.summary()


def format_ns(ns):
    if ns is None:
        return "-"
    if ns < 1_000:
        return "%dns" % ns
    if ns < 1_000_000:
        return "%.1fus" % (ns / 1e3)
    if ns < 1_000_000_000:
        return "%.1fms" % (ns / 1e6)
    return "%.2fs" % (ns / 1e9)


def format_wall(ns):
    """UTC wall-clock time of ns since the epoch, millisecond precision."""
    import datetime
    if ns is None:
        return "-"
    try:
        dt = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "?"
    return dt.strftime("%Y-%m-%d %H:%M:%S.") + "%03dZ" % (dt.microsecond // 1000)


def format_seconds(ns):
    return "-" if ns is None else "%.3fs" % (ns / 1e9)


def format_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0
