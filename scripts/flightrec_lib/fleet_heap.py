"""fleet_heap: the `heap` report of a ClickHouse fleet database (`heap
--clickhouse URL`; issue 42, docs/FLEET.md): the same document cmd_heap.build
makes from files (sites with estimated bytes and count allocated, live at the
end, their heaviest call path and library context; the live total and its
peak), so cmd_heap formats it unchanged.

The database aggregates, per event: allocated bytes and counts per stack
(GROUP BY stack_id), what is live at the end per stack (each address's last
event is an allocation: argMax, an allocation first at equal times), and the
peak of the live total (per address the change each event makes — the
block it leaves there minus the one there before — then a running sum over
all of them in time order: arrayCumSum; on the server, as one array of every
allocation and free of the selection). Python receives one row per distinct
stack and resolves each stack to its site with the file reader's own rules
(heap_sites.py; the site is a property of the stack's frames), so memory
follows the distinct stacks.
Values are query parameters (FleetTrace.where), never SQL text."""
from collections import Counter
import re

from . import heap_sites, profiles


def build(trace):
    """(document, notes) as cmd_heap.build returns them, for the selected processes."""
    conn = trace.conn
    w, p = trace.where()
    samples, frees = trace.target.table("samples"), trace.target.table("frees")
    allocs = "%s AND kind = 3" % w
    per_stack = conn.execute("SELECT stack_id, sum(samples), sum(weight), sum(objects) FROM %s WHERE %s "
                             "GROUP BY stack_id ORDER BY stack_id" % (samples, allocs), p)
    # Live at the end: each address's last event (k: an allocation before a
    # free at equal times) when it is an allocation.
    events = ("SELECT proc_id, address, time * 2 AS k, toUInt8(1) AS isalloc, weight AS wt, stack_id AS s FROM %s "
              "WHERE %s AND stack_id != 1 UNION ALL SELECT proc_id, address, time * 2 + 1 AS k, toUInt8(0) AS isalloc,"
              " toFloat64(0) AS wt, toUInt64(0) AS s FROM %s WHERE %s" % (samples, allocs, frees, w))
    live = dict(conn.execute(
        "SELECT ls, sum(lw) FROM (SELECT argMax(s, k) AS ls, argMax(wt, k) AS lw, argMax(isalloc, k) AS last_alloc"
        " FROM (%s) GROUP BY proc_id, address) WHERE last_alloc = 1 GROUP BY ls" % events, p))
    # The peak of the live total: each event's change (an allocation adds its
    # weight, and like a free takes away the block the address held), summed
    # in time order over every process.
    peak = conn.execute(
        "SELECT length(c), arrayReduce('max', c) FROM (SELECT arrayCumSum(arrayMap(x -> x.2,"
        " arraySort(x -> x.1, groupArray((dk, dw))))) AS c FROM (SELECT dk, dw FROM ("
        # per address, in time order: what it holds after each event (a free's
        # weight is 0), and so the change each event makes (no lambda reads
        # another element: a captured array would be copied per element)
        "  SELECT arraySort(x -> x.1, groupArray((k, wt))) AS ev, arrayMap(x -> x.1, ev) AS ks,"
        "   arrayMap(x -> x.2, ev) AS held, arrayMap((h, pv) -> h - pv, held, arrayPopBack(arrayPushFront(held, 0.)))"
        "   AS ds FROM (%s) GROUP BY proc_id, address) ARRAY JOIN ks AS dk, ds AS dw))" % events, p)
    peak_total = max(0.0, peak[0][1]) if peak and peak[0][0] else 0.0
    rates = Counter()
    for rate, n in conn.execute("SELECT period, count() AS n FROM %s WHERE %s AND stack_id != 1 GROUP BY period "
                                "ORDER BY min(time), period" % (samples, allocs), p):
        rates[rate] = n  # in the order first met, as the file reader's Counter

    frames = trace.stack_frames({r[0] for r in per_stack if r[0] > 1})
    sites = {}
    unattributed = heap_sites.Site(profiles.UNATTRIBUTED, "", 0, profiles.UNATTRIBUTED)
    unattributed_samples = 0
    live_total = 0.0
    for sid, n, wt, ob in per_stack:
        if sid == 1:
            unattributed.bytes += wt
            unattributed.count += ob
            unattributed_samples += n
            continue
        fr = [] if sid == 0 else frames.get(sid) or [
            {"function": "<missing stack>", "file": "", "line": 0, "address": 0, "mapping": None, "inlined": False}]
        site, path, via = heap_sites.resolve_site(fr, sites)
        site.bytes += wt
        site.count += ob
        site.paths[path] += wt
        site.vias[via] += wt
        lw = live.get(sid)
        if lw:
            site.live += lw
            live_total += lw
    return heap_sites.document(sites, unattributed, unattributed_samples, live_total, peak_total, rates,
                             lambda: configured_rate(trace),
                             trace.dropped() if trace.ledger_times else {})  # (a ledger from before drop counts)


def configured_rate(trace):
    """The first process.start's alloc_sample_bytes (cmd_heap._configured_rate), or 0."""
    w, p = trace.where()
    for names, values in trace.conn.execute(
            "SELECT names, values FROM %s WHERE %s AND has(names, 'alloc_sample_bytes') ORDER BY time, pid" % (
                trace.target.table("processes"), w), p):
        v = values[names.index("alloc_sample_bytes")]
        if re.fullmatch(r"-?\d+", v):
            return int(v)
    return 0
