"""request_report: the pieces of the `requests` report that the file reader
(commands/cmd_requests.py) and the ClickHouse path (fleet_reports.py) build
alike: the histogram's 1-2-5 bucket edges, the --endpoint/--trace-id
predicate, a slow request as --json lists it, and a call tree as nested
dicts. Here, below both, so that no library module imports the command
(docs/ARCHITECTURE.md, "The reader's layers")."""
import fnmatch

from . import request_inference
from .request_inference import CONN, ENDPOINT, PID, TRACE


def bucket_edges(limit):
    """Bucket edges 0, 1us, 2us, 5us, 10us, 20us, 50us, ... up past limit."""
    edges, base = [0], 1000
    while edges[-1] <= limit:
        for m in (1, 2, 5):
            edges.append(base * m)
        base *= 10
    return edges


EDGES = bucket_edges(1 << 64)


def request_filter(endpoint=None, trace_id=None):
    """A predicate over request tuples for --endpoint (shell pattern) and
    --trace-id (a prefix of the trace id, or the x-request-id), or None."""
    if endpoint is None and trace_id is None:
        return None
    want = trace_id.strip().lower() if trace_id is not None else None

    def keep(r):
        if endpoint is not None and not fnmatch.fnmatchcase(r[ENDPOINT] or "", endpoint):
            return False
        if want is not None:
            t = r[TRACE]
            if not t or not want or not ((t[0] and t[0].startswith(want)) or (t[3] and t[3].lower() == want)):
                return False
        return True
    return keep


def request_dict(r, conns):
    d = request_inference.as_dict(r)
    d["local"], d["peer"] = conns.get((r[PID], r[CONN]), ("", ""))
    d["tree"] = None
    return d


def tree_json(root):
    """The call tree as nested dicts {name, samples, value, self_value, children}."""
    def node(n):
        return {"name": n.name, "samples": n.samples, "value": n.value, "self_value": n.self_value,
                "children": []}
    top = {"samples": root.samples, "value": root.value, "children": []}
    stack = [(c, top["children"]) for c in reversed(list(root.children.values()))]
    while stack:
        n, siblings = stack.pop()
        d = node(n)
        siblings.append(d)
        for c in reversed(list(n.children.values())):
            stack.append((c, d["children"]))
    return top
