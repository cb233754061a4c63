"""trace_stats: what a run left on disk. Bytes for every side; for
flightrec also the event counts by type, what it dropped, and whether
every segment was sealed (read with the dump tool's own library)."""
import os
import sys

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)

from flightrec_lib.trace import Trace  # noqa: E402  (path set up above)


def flightrec_summary(outdir):
    """{'events': {type: n}, 'dropped': {kind: n}, 'segments': n, 'unsealed': n, 'problems': n}."""
    trace = Trace([outdir])
    return {
        "events": trace.event_counts(),
        "dropped": trace.dropped(),
        "segments": len(trace.segments),
        "unsealed": sum(1 for s in trace.segments if s.state != "sealed"),
        "problems": len(list(trace.problems())) + len(trace.errors),
    }
