"""request_samples: the samples taken inside requests — the CPU, off-CPU
and allocation samples of each request's handling thread that fall in its
time window (read_samples), and one window's call paths (window_entries).

Shared by `requests --slowest` (cmd_requests.py) and the slow-against-typical
comparison (requests_diff.py).
"""
import bisect

from . import profiles

KINDS = ("cpu", "offcpu", "alloc")
KIND_EVENTS = {"cpu": "cpu.sample", "offcpu": "offcpu.sample", "alloc": "alloc.sample"}


def merge_windows(windows):
    """{thread: [(lo, hi)]} -> {thread: (los, his)}: the union of each
    thread's windows as sorted, disjoint intervals."""
    out = {}
    for key, spans in windows.items():
        los, his = [], []
        for lo, hi in sorted(spans):
            if his and lo <= his[-1]:
                if hi > his[-1]:
                    his[-1] = hi
            else:
                los.append(lo)
                his.append(hi)
        out[key] = (los, his)
    return out


def read_samples(trace, windows):
    """{kind: {(pid, tid): (times, [(time, weight, end, segment, stack id)])}}, time-sorted,
    of the samples inside the given windows ({(pid, tid): [(lo, hi)]}): what
    is held follows the requests asked about, not the trace.
    end is time + duration for off-CPU blocks (they are clipped to the window), else time."""
    merged = merge_windows(windows)
    out = {k: {} for k in KINDS}
    for kind in KINDS:
        for b in trace.batches({KIND_EVENTS[kind]}):
            seg = b.segment
            pid = seg.pid
            if not any(k[0] == pid for k in merged):
                continue
            if kind == "cpu":
                cols = b.columns_named(["time", "tid", "stack", "period_ns"])
            elif kind == "offcpu":
                cols = b.columns_named(["time", "tid", "stack", "duration_ns"])
            else:
                cols = b.columns_named(["time", "tid", "stack", "size", "sample_bytes"])
            if cols is None:
                continue
            for row in zip(*cols):
                key = (pid, row[1])
                spans = merged.get(key)
                if spans is None:
                    continue
                t, stack = row[0], row[2]
                end = t + row[3] if kind == "offcpu" else t
                los, his = spans
                i = bisect.bisect_right(los, end) - 1
                if i < 0 or his[i] < t:
                    continue  # in no window
                if kind == "cpu":
                    item = (t, row[3], t, seg, stack)
                elif kind == "offcpu":
                    item = (t, row[3], end, seg, stack)
                else:
                    item = (t, profiles.alloc_weight(row[3], row[4])[0], t, seg, stack)
                out[kind].setdefault(key, []).append(item)
    for per_thread in out.values():
        for key, items in per_thread.items():
            items.sort(key=lambda x: x[0])
            per_thread[key] = ([x[0] for x in items], items)
    return out


def window_entries(kind, thread_samples, lo, hi):
    """(root-first labels, samples, weight) of the samples of one thread in [lo, hi].
    Off-CPU blocks count for the part of them inside the window."""
    if not thread_samples:
        return []
    times, items = thread_samples
    start = bisect.bisect_left(times, lo)
    if kind == "offcpu":
        # A block that began before the window may reach into it. A thread has
        # one block at a time, so only the last one before the window can.
        start = max(0, start - 1)
    entries = []
    for i in range(start, len(items)):
        t, w, end, seg, stack = items[i]
        if t > hi:
            break
        if kind == "offcpu":
            overlap = min(end, hi) - max(t, lo)
            if overlap <= 0:
                continue
            w = overlap
        elif t < lo:
            continue
        frames = profiles.trim_bootstrap(seg.frames(stack)) if stack else profiles.NO_STACK
        entries.append(([profiles.frame_label(f) for f in reversed(frames)], 1, w))
    return entries
