"""chrome: the whole trace as a Chrome trace-event / Perfetto JSON timeline
(open it in ui.perfetto.dev or chrome://tracing): processes and threads as
named tracks, CPU samples, off-CPU intervals, allocations and every other
event type, driven only by the schema's field names (see chrome_trace.py),
and the requests request_inference.py derives from the socket calls."""
import os

from .. import chrome_trace, cli, profiles, request_inference, segment
from ..segment import STACK as KSTACK


def register(subparsers):
    p = subparsers.add_parser("chrome", help="Chrome/Perfetto JSON timeline of every event")
    p.add_argument("-o", "--output", required=True, metavar="FILE.json", help="where to write it")
    cli.add_paths_argument(p)
    p.set_defaults(func=run)


def _labels(frames):
    return [profiles.frame_label(f) for f in frames]


def timeline(trace, spill_dir=None, on_damage=None):
    """The trace as a ChromeTrace (write() it out): what `chrome` writes and
    the viewer draws. on_damage(path, message) hears of blocks found damaged
    only now (default: one stderr line per file). A ClickHouse fleet
    (--clickhouse): the same ChromeTrace from its tables (fleet_timeline)."""
    if getattr(trace, "fleet", False):
        from .. import fleet_timeline
        return fleet_timeline.timeline(trace, spill_dir=spill_dir)[0]
    on_damage = on_damage or cli.err_file
    ct = chrome_trace.ChromeTrace(spill_dir=spill_dir)
    for seg in trace.segments:
        pid = seg.pid
        ct.process(pid, "%s (pid %d)" % (seg.header.get("service") or "process", pid))
    for e in trace.events({"process.start"}):
        name = e.get("service") or os.path.basename(e.get("exe") or "") or "process"
        ct.process(e.get("pid"), "%s (pid %s)" % (name, e.get("pid")))
        ct.thread(e.get("pid"), e.get("pid"), os.path.basename(e.get("exe") or ""))
    for rec in trace.threads():
        ct.thread(rec["pid"], rec["tid"], rec.get("name"))
    for seg in trace.segments:
        labels_of = {}  # id(resolved frame list) -> labels: each distinct stack is labelled once
        for batch in seg.batches:
            cols = seg.resolved_columns(batch)
            if cols is None:
                # Columns decode lazily: this damage is found only now (exit status 1
                # follows from segment.bad_blocks).
                on_damage(seg.path, "damaged %s block at offset %d skipped" % (batch.type.name, batch.offset))
                continue
            # The row's keys, not the schema's names: a damaged schema can name a
            # stack field "type" or "pid", which rows() renames.
            stack_fields = [key for key, f in zip(segment.row_field_names(batch.type), batch.type.fields)
                            if f.type == KSTACK]
            for e in seg.rows(batch, cols):
                labels = None
                for name in stack_fields:
                    frames = e.pop(name)
                    hit = labels_of.get(id(frames))
                    if hit is None:
                        # Keep the frames referenced so their id stays unique.
                        hit = labels_of[id(frames)] = (frames, _labels(frames))
                    if labels is None:
                        labels = hit[1]
                    else:
                        e[name] = hit[1]  # a second stack field stays in args
                del e["type"]
                ct.add(e.pop("pid", seg.pid), batch.type.name, seg.wall_ns(e["time"]), e, labels)
    # Requests are derived when the trace is read (request_inference.py); they
    # get the fields the recorder's own `request` events had (older traces:
    # already added above with their segments).
    first_segment = {}
    for seg in trace.segments:
        first_segment.setdefault(seg.pid, seg)
    for start, pid, conn, tid, role, dur, bin_, bout, endpoint, tr in request_inference.iter_unrecorded(trace):
        fields = {"time": start, "tid": tid, "conn": conn, "duration_ns": dur, "bytes_in": bin_, "bytes_out": bout,
                  "role": role}
        # Issue 41: the slice is labelled with its endpoint (and trace id).
        if endpoint:
            fields["endpoint"] = endpoint
        if tr:
            fields.update(request_inference.trace_dict(tr))
        ct.add(pid, "request", first_segment[pid].wall_ns(start), fields)
    return ct


def run(args):
    trace = cli.open_trace(args.paths)
    ct = timeline(trace, spill_dir=os.path.dirname(os.path.abspath(args.output)))
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            n = ct.write(f)
    except OSError as e:
        raise cli.UsageError("cannot write %s: %s" % (args.output, e.strerror or e)) from None
    if n == 0:
        cli.err("no events in the trace; wrote an empty timeline to %s" % args.output)
    return cli.exit_status(trace)
