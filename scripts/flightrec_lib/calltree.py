"""calltree: the call-tree summary renderer shared by the reports.

Input is a sequence of (path, samples, value) entries where `path` is a
root-first sequence of labels (function names for profiles; anything
hierarchical for other reports, e.g. request phases). The tree keeps
children in first-seen order, so feed entries in time order. Output is the
"call tree summary" layout:

    # samples |  total ms |   self ms | call tree
          300 |  3,030.30 |      0.00 | ┬ worker_main
          300 |  3,030.30 |      0.00 | ╰┬ outer_step
          210 |  2,121.21 |  2,121.21 |  ├─ leaf_a
           90 |    909.09 |    909.09 |  ╰─ leaf_b

Everything here is iterative (no recursion), so stacks thousands of frames
deep cannot hit Python's recursion limit.
"""


class Node:
    """One call path. `samples`/`value` include descendants; `self_*` do not."""
    __slots__ = ("name", "samples", "value", "self_samples", "self_value", "children")

    def __init__(self, name):
        self.name = name
        self.samples = 0
        self.value = 0
        self.self_samples = 0
        self.self_value = 0
        # dict keeps insertion order: children stay in first-seen order.
        self.children = {}


def build(entries):
    """Merges (root-first path, samples, value) entries into a tree; returns the
    invisible root node (name None) whose children are the top-level frames."""
    root = Node(None)
    for path, samples, value in entries:
        node = root
        node.samples += samples
        node.value += value
        for name in path:
            child = node.children.get(name)
            if child is None:
                child = node.children[name] = Node(name)
            child.samples += samples
            child.value += value
            node = child
        node.self_samples += samples
        node.self_value += value
    return root


def _format_ms(ns):
    return "{:,.2f}".format(ns / 1e6)


def _format_int(v):
    return "{:,}".format(int(round(v)))


# unit -> (column label, formatter of a summed value)
UNITS = {
    "ns": ("ms", _format_ms),
    "bytes": ("bytes", _format_int),
    "count": ("count", _format_int),
}


def rows(root, min_pct=0.0):
    """Yields (node, prefix) in display order, pruning subtrees whose value is
    below min_pct percent of the whole (by samples when every value is 0)."""
    use_value = root.value > 0
    total = root.value if use_value else root.samples
    floor = total * (min_pct / 100.0)

    def keep(node):
        return (node.value if use_value else node.samples) >= floor and node.samples > 0

    # Stack of (node, prefix for the node's own line, prefix for its children,
    # connector). Roots have no connector and their children no indent; below
    # that the tree draws ├ for a sibling that has followers, ╰ for the last.
    stack = []
    tops = [c for c in root.children.values() if keep(c)]
    for child in reversed(tops):
        stack.append((child, "", ""))
    while stack:
        node, line_prefix, child_prefix = stack.pop()
        kids = [c for c in node.children.values() if keep(c)]
        yield node, line_prefix + ("┬ " if kids else "─ "), kids
        for i in range(len(kids) - 1, -1, -1):
            last = i == len(kids) - 1
            connector = "╰" if last else "├"
            stack.append((kids[i], child_prefix + connector,
                          child_prefix + (" " if last else "│")))


def render(root, unit="ns", min_pct=0.0, samples_header="# samples"):
    """Returns the table as a list of lines (no trailing newlines)."""
    label, fmt = UNITS[unit]
    table = []
    for node, drawn, _ in rows(root, min_pct):
        table.append((_format_int(node.samples), fmt(node.value), fmt(node.self_value),
                      drawn + str(node.name)))
    headers = (samples_header, "total " + label, "self " + label, "call tree")
    # Minimum widths follow the documented layout; wider numbers widen the column.
    widths = [max([15, len(headers[0])] + [len(r[0]) for r in table]),
              max([9, len(headers[1])] + [len(r[1]) for r in table]),
              max([9, len(headers[2])] + [len(r[2]) for r in table])]
    out = []
    for r in [headers] + table:
        out.append("%s | %s | %s | %s" % (r[0].rjust(widths[0]), r[1].rjust(widths[1]),
                                          r[2].rjust(widths[2]), r[3]))
    return out
