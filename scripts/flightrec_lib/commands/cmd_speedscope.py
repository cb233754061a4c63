"""speedscope: export a profile as a speedscope file (open it at
https://www.speedscope.app or with the `speedscope` npm package's viewer),
one profile per thread: CPU and allocation samples as sampled profiles in
time order (weights: nanoseconds of CPU, estimated bytes), off-CPU blocks
as evented profiles (each block from its start to its end), the live heap
as a sampled profile of what was never freed. The thread with the most
weight is shown first. Format details: speedscope.py."""
import json
import os

from .. import cli, profiles, speedscope


def register(subparsers):
    p = subparsers.add_parser("speedscope", help="export a profile as a speedscope file, one profile per thread")
    p.add_argument("-o", "--output", required=True, metavar="FILE.json", help="where to write it")
    profiles.add_arguments(p)
    p.set_defaults(func=run)


UNITS = {"cpu": "nanoseconds", "offcpu": "nanoseconds", "alloc": "bytes", "live": "bytes"}
WEIGHT_FIELDS = {"cpu": ["period_ns"], "offcpu": ["duration_ns"], "alloc": ["size", "sample_bytes"]}


def _thread_name(names, procs, pid, tid):
    known = names.get((pid, tid))
    if known:
        return known[-1]
    if tid == pid and pid in procs:
        return os.path.basename(procs[pid].get("exe") or "") or "main"
    return "thread"


def _trace_start(trace):
    starts = []
    for seg in trace.segments:
        lo, _ = seg.time_range()
        if lo is not None:
            starts.append(seg.wall_ns(lo))
    return min(starts) if starts else 0


def per_thread(trace, kind, thread=None, t_from=None, t_to=None):
    """({(pid, tid): [(time from trace start, leaf-first frames, weight, end)]}, problems)."""
    names, procs = profiles._thread_names(trace), profiles._processes(trace)
    selector = profiles._select_threads(thread, names, procs)
    bounds = profiles._time_bounds(trace, t_from, t_to)
    t0 = _trace_start(trace)
    problems = set()
    out = {}
    event = profiles.KINDS[kind]["event"]
    fields = ["time", "tid", "stack"] + WEIGHT_FIELDS[kind]
    for seg in trace.segments:
        pid = seg.pid
        shift = seg.wall_ns(0) - t0  # monotonic -> ns from the trace start
        frames_of = {}
        for batch in seg.batches:
            if batch.type.name != event:
                continue
            cols = profiles.select_columns(batch, fields, problems)
            if cols is None:
                continue
            for row in zip(*(cols[f] for f in fields)):
                t, tid, sid = row[0], row[1], row[2]
                if selector is not None:
                    if selector[0] == "tid" and tid != selector[1]:
                        continue
                    if selector[0] == "keys" and (pid, tid) not in selector[1]:
                        continue
                if bounds is not None and not bounds[0] <= seg.wall_ns(t) <= bounds[1]:
                    continue
                frames = frames_of.get(sid)
                if frames is None:
                    frames = frames_of[sid] = profiles.trim_bootstrap(seg.frames(sid) or []) or profiles.NO_STACK
                if kind == "alloc":
                    weight = profiles.alloc_weight(row[3], row[4])[0]
                else:
                    weight = row[3]
                start = t + shift
                out.setdefault((pid, tid), []).append((start, frames, weight, start + row[3]))
    return out, names, procs, sorted(problems)


def build(trace, kind, thread=None, t_from=None, t_to=None, title=None):
    """The speedscope document (a dict) and the problems met on the way."""
    doc = speedscope.Document(title or "flightrec %s profile" % kind)
    unit = UNITS[kind]
    if kind == "live":
        profile = profiles.build(trace, kind, thread=thread, t_from=t_from, t_to=t_to)
        t0 = _trace_start(trace)
        threads = {}
        for e in profile.entries:
            threads.setdefault((e.pid, e.tid, e.thread), []).append(
                (e.first_time - t0, profiles.trim_bootstrap(e.frames), e.weight))
        for (pid, tid, tname), samples in sorted(threads.items(), key=lambda kv: kv[0][:2]):
            doc.sampled("%s (pid %d, tid %d): live heap" % (tname or "thread", pid, tid), unit, samples)
        return doc.as_dict(), profile.problems
    samples, names, procs, problems = per_thread(trace, kind, thread, t_from, t_to)
    title = profiles.KINDS[kind]["title"]
    for (pid, tid), rows in sorted(samples.items()):
        label = "%s (pid %d, tid %d): %s" % (_thread_name(names, procs, pid, tid), pid, tid, title)
        if kind == "offcpu":
            doc.evented(label, unit, [(start, end, frames) for start, frames, _, end in rows])
        else:
            doc.sampled(label, unit, [(start, frames, w) for start, frames, w, _ in rows])
    return doc.as_dict(), problems


def run(args):
    trace = cli.open_trace(args.paths)
    try:
        doc, problems = build(trace, args.kind, thread=args.thread, t_from=args.t_from, t_to=args.t_to,
                              title="flightrec %s: %s" % (args.kind, " ".join(args.paths)))
    except profiles.ProfileError as e:
        raise cli.UsageError(str(e)) from None
    for path, message in problems:
        cli.err_file(path, message)
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
    except OSError as e:
        raise cli.UsageError("cannot write %s: %s" % (args.output, e.strerror or e)) from None
    n = len(doc["profiles"])
    if not n:
        cli.err("no %s samples to export; wrote an empty speedscope file to %s" % (
            profiles.KINDS[args.kind]["event"], args.output))
    else:
        cli.err("wrote %s: %d thread profile%s, %d frames" % (
            os.path.basename(args.output), n, "" if n == 1 else "s", len(doc["shared"]["frames"])))
    return cli.exit_status(trace)
