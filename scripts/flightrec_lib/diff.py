"""diff: compares two sets of weighted call paths — two traces, two time
windows, or slow requests against typical ones — per function, per call
path, and as colours for a differential flame graph.

Both sides are (root-first labels, samples, weight) entries, as
Profile.paths() and the requests report produce them. Each side may carry a
divisor (`per`): the requests diff divides by the number of requests on
each side, so it compares the time one slow request spends in a function
with the time one typical request does.

Changes are measured two ways:
  value  B - A in the profile's unit (after the per-side divisor);
  share  B's percentage of its side's total minus A's, in points: how much
         more of the time a function takes, whatever the two sides' lengths.
A trace diff orders functions by the change of their self share (the
function that grew, not every caller above it); the requests diff by the
change of self value per request.
"""
from . import calltree


class Side:
    """One side of a diff: entries plus what they are divided by."""

    def __init__(self, entries, per=1.0, label=""):
        self.entries = list(entries)
        self.per = float(per) if per else 1.0
        self.label = label
        self.samples = sum(n for _, n, _ in self.entries)
        self.weight = sum(w for _, _, w in self.entries)
        # Weights, or sample counts when every weight is zero (as calltree does).
        self.by_samples = self.weight <= 0
        self.total = float(self.samples if self.by_samples else self.weight)

    def amount(self, samples, weight):
        return samples if self.by_samples else weight

    def value(self, amount):
        return amount / self.per

    def share(self, amount):
        return 100.0 * amount / self.total if self.total else 0.0


def _functions(side):
    """{label: [self amount, total amount]}; a function counts once per path towards its total."""
    table = {}
    for path, n, w in side.entries:
        if not path:
            continue
        a = side.amount(n, w)
        leaf = table.setdefault(path[-1], [0.0, 0.0])
        leaf[0] += a
        for label in set(path):
            table.setdefault(label, [0.0, 0.0])[1] += a
    return table


def function_rows(a, b, order="share"):
    """Per function present on either side: {function, a_self, b_self, a_total,
    b_total (values), a_self_pct, b_self_pct, a_total_pct, b_total_pct,
    delta_self, delta_total (values), delta_self_pct, delta_total_pct
    (points)}, largest change of self (by `order`: share or value) first."""
    fa, fb = _functions(a), _functions(b)
    rows = []
    for name in set(fa) | set(fb):
        sa, ta = fa.get(name, (0.0, 0.0))
        sb, tb = fb.get(name, (0.0, 0.0))
        r = {"function": name,
             "a_self": a.value(sa), "b_self": b.value(sb), "a_total": a.value(ta), "b_total": b.value(tb),
             "a_self_pct": a.share(sa), "b_self_pct": b.share(sb),
             "a_total_pct": a.share(ta), "b_total_pct": b.share(tb)}
        r["delta_self"] = r["b_self"] - r["a_self"]
        r["delta_total"] = r["b_total"] - r["a_total"]
        r["delta_self_pct"] = r["b_self_pct"] - r["a_self_pct"]
        r["delta_total_pct"] = r["b_total_pct"] - r["a_total_pct"]
        rows.append(r)
    key = "delta_self_pct" if order == "share" else "delta_self"
    other = "delta_total_pct" if order == "share" else "delta_total"
    rows.sort(key=lambda r: (-abs(r[key]), -abs(r[other]), r["function"]))
    return rows


def path_amounts(side):
    """{root-first path prefix (tuple): amount} over every prefix of every entry."""
    out = {}
    for path, n, w in side.entries:
        a = side.amount(n, w)
        for i in range(1, len(path) + 1):
            key = tuple(path[:i])
            out[key] = out.get(key, 0.0) + a
    return out


def tree_rows(a, b, min_pct=0.0):
    """The merged call tree of both sides in display order: (drawn label,
    path, A amount, B amount). Shape and order come from both sides
    together (each side's share summed), so a path present on one side only
    still shows; paths whose two shares average under min_pct percent are
    left out."""
    pa, pb = path_amounts(a), path_amounts(b)
    both = []
    for side in (a, b):
        if not side.total:
            continue
        for path, n, w in side.entries:
            both.append((path, max(n, 1), 100.0 * side.amount(n, w) / side.total))
    root = calltree.build(both)
    paths = {}
    stack = [(root, ())]
    while stack:
        node, path = stack.pop()
        paths[id(node)] = path
        for name, child in node.children.items():
            stack.append((child, path + (name,)))
    out = []
    for node, drawn, _ in calltree.rows(root, min_pct):
        path = paths[id(node)]
        out.append((drawn + str(node.name), path, pa.get(path, 0.0), pb.get(path, 0.0)))
    return out


def painter(a, b):
    """paint(path) for flamegraph.svg drawing side B: red where a call path
    takes a larger share than on side A, blue where smaller, as deep as the
    largest change anywhere in the graph."""
    pa, pb = path_amounts(a), path_amounts(b)
    deltas = {p: b.share(pb.get(p, 0.0)) - a.share(pa.get(p, 0.0)) for p in pb}
    peak = max((abs(d) for d in deltas.values()), default=0.0) or 1.0

    def paint(path):
        if not path:
            return "rgb(220,220,220)", ""
        d = deltas.get(path, 0.0)
        fade = int(round(210 * (1.0 - min(1.0, abs(d) / peak))))
        color = "rgb(255,%d,%d)" % (fade, fade) if d > 0 else \
            "rgb(%d,%d,255)" % (fade, fade) if d < 0 else "rgb(255,255,255)"
        return color, "%s %.2f%% -> %s %.2f%%, %+.2f points" % (
            a.label or "A", a.share(pa.get(path, 0.0)), b.label or "B", b.share(pb.get(path, 0.0)), d)
    return paint
