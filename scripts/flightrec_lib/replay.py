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
"""
import heapq
import operator


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
