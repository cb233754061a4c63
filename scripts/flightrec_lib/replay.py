"""replay: the order in which the live-heap reports (heap, --kind live)
replay a process's allocations and frees, one group of segments at a time.

Replaying needs each process's alloc.sample and alloc.free events in time
order. Sorting all of them at once would hold every event of the trace in
memory; but a process writes its segments one after the other, so their
time ranges rarely overlap. Segments are grouped here into clusters whose
time ranges overlap (directly or through others); clusters are disjoint in
time, so sorting each cluster on its own and replaying the clusters in time
order is the same as sorting everything. Memory then follows the largest
cluster (usually one segment), not the trace.

    for members in clusters(spans):   # spans: [(lo, hi, item)]
        ...                           # members: items, in the order given

wall_ordered() does the same for a stream that must come out sorted by a
key that only roughly follows the clusters (the wall clock of a process
whose segments have different clock anchors).

LiveHeap replays one process's allocations and frees with them; heap's
live and peak estimates and profiles' --kind live both come from it.
"""
import heapq
import operator
from itertools import repeat


def widen(seg_spans, si, times):
    """Widens segment si's [lo, hi] in seg_spans (the spans clusters() takes)
    to cover times."""
    lo, hi = min(times), max(times)
    span = seg_spans.get(si)
    if span is None:
        seg_spans[si] = [lo, hi]
    else:
        span[0] = min(span[0], lo)
        span[1] = max(span[1], hi)


def clusters(spans):
    """Lists of the items of spans [(lo, hi, item)] whose [lo, hi] ranges
    overlap (touching ends count: equal times must sort together), in time
    order; each list keeps the order spans gave its items."""
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    group, group_hi = [], None
    for i in order:
        lo, hi, _ = spans[i]
        if group and lo > group_hi:
            yield [spans[j][2] for j in sorted(group)]
            group = []
        group_hi = hi if not group or hi > group_hi else group_hi
        group.append(i)
    if group:
        yield [spans[j][2] for j in sorted(group)]


def wall_ordered(chunks):
    """chunks: (lowest key any later chunk can hold, [(key, value)]) in
    order. Yields every (key, value) sorted by key, stable (on equal keys the
    earlier chunk, then the earlier position, goes first), holding back only
    what a later chunk could still precede."""
    pending = []
    for later_min, items in chunks:
        pending.extend(items)
        pending.sort(key=operator.itemgetter(0))  # stable; already sorted runs are cheap
        if later_min is None:
            continue
        cut = 0
        while cut < len(pending) and pending[cut][0] <= later_min:
            cut += 1
        yield from pending[:cut]
        del pending[:cut]
    yield from pending


def merge_streams(streams):
    """Streams each sorted by key ((key, value) pairs) merged into one;
    on equal keys the earlier stream goes first, as a stable sort of their
    concatenation would have it."""
    return heapq.merge(*streams, key=operator.itemgetter(0))


class LiveHeap:
    """One process's sampled blocks replayed in time order, a cluster of its
    segments at a time — the live-heap replay both `heap` and `--kind live`
    use. `held`: address -> the block the caller made of its latest sample
    (a free drops it; a second sample of a held address replaces it, in
    place: its free was lost).

    spans: {segment index: [lo, hi]} of the process's alloc event times (widen()).
    read(batch, fields): {field: column}, or None to skip the batch
    (profiles.select_columns with the report's problem set)."""

    def __init__(self, segments, spans, read):
        self.segments = segments
        self.spans = spans
        self.read = read
        self.held = {}

    def clusters(self):
        """The process's segment indexes in clusters (clusters())."""
        return clusters([(lo, hi, si) for si, (lo, hi) in self.spans.items()])

    def events(self, members, fields, take, free_until=None):
        """A cluster's alloc events, sorted (at equal times an allocation
        goes first): (time, 0 alloc / 1 free, seq, address, block, wall
        offset). take(si, cols) gives the segment's kept alloc.sample events
        of a batch as (times, addresses, blocks), cols being read(batch,
        fields); free_until(si): frees after it are left out (None: none)."""
        events = []
        seq = 0
        for si in members:  # segment order, as the first pass met them
            seg = self.segments[si]
            off = seg.wall_offset()
            hi = free_until(si) if free_until is not None else None
            for batch in seg.batches:
                name = batch.type.name
                if name == "alloc.free":
                    cols = self.read(batch, ["time", "address"])
                    if cols is not None:
                        events.extend((t, 1, 0, a, None, off) for t, a in zip(cols["time"], cols["address"])
                                      if hi is None or t <= hi)
                    continue
                if name != "alloc.sample":
                    continue
                cols = self.read(batch, fields)
                if cols is None:
                    continue
                times, addrs, blocks = take(si, cols)
                n = len(times)
                events.extend(zip(times, repeat(0), range(seq, seq + n), addrs, blocks, repeat(off)))
                seq += n
        events.sort(key=operator.itemgetter(0, 1, 2))
        return events

    def replay(self, events, changes=None):
        """Applies a cluster's events to held; with changes (a list), appends
        (wall time, +/- weight) for every change of the live total, a block's
        weight being its last item."""
        held = self.held
        if changes is None:
            for t, what, _, addr, block, _ in events:
                if what == 0:
                    held[addr] = block
                else:
                    held.pop(addr, None)
            return
        for t, what, _, addr, block, off in events:
            if what == 0:
                old = held.get(addr)
                if old is not None:  # its free was lost (dropped): do not count it twice
                    changes.append((t + off, -old[-1]))
                held[addr] = block
                changes.append((t + off, block[-1]))
            else:
                old = held.pop(addr, None)
                if old is not None:
                    changes.append((t + off, -old[-1]))
