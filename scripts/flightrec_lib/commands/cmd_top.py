"""top: per function, self and total samples and time (or bytes), sorted by
self; libc's thread/process bootstrap frames and the recorder's trampoline
below a thread's start routine are left out. `--json` prints {"kind", "samples", "functions": [{"function" (short
name), "function_full" (as demangled), "file",
"self", "total", plus self_ns/total_ns or self_bytes/total_bytes}]}; self
and total count samples."""
import json
import sys

from .. import cli, profile_cli, profiles


def register(subparsers):
    p = subparsers.add_parser("top", help="functions by self time (cpu, offcpu) or bytes (alloc, live)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="show the first N functions (text default 30, JSON default all)")
    profile_cli.add_arguments(p)
    p.set_defaults(func=run)


def _value_key(profile):
    return "ns" if profile.unit == "ns" else "bytes"


def run(args):
    if args.limit is not None and args.limit < 0:
        raise cli.UsageError("--limit must be >= 0")
    trace, profile = profile_cli.open_profile(args)
    rows = profile.functions()
    limit = args.limit if args.limit is not None else (None if args.json else 30)
    shown = rows if limit is None else rows[:limit]
    vk = _value_key(profile)
    if args.json:
        doc = {"kind": profile.kind, "samples": profile.samples,
               "total_" + vk: int(round(profile.weight)), "functions": []}
        for r in shown:
            doc["functions"].append({"function": r["function"], "function_full": r["function_full"],
                                     "file": r["file"],
                                     "self": r["self"], "total": r["total"],
                                     "self_" + vk: int(round(r["self_w"])),
                                     "total_" + vk: int(round(r["total_w"]))})
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
        if not rows:
            cli.err(profiles.empty_message(profile, trace))
        return cli.exit_status(trace)
    if not rows:
        print(profiles.empty_message(profile, trace))
        return cli.exit_status(trace)
    total_w = profile.weight or 1.0
    if profile.unit == "ns":
        label, fmt = "ms", lambda v: "{:,.2f}".format(v / 1e6)
    else:
        label, fmt = "bytes", lambda v: "{:,}".format(int(round(v)))
    print("%s: %s samples, %s %s%s" % (
        profile.spec["title"], "{:,}".format(profile.samples), fmt(profile.weight), label,
        "" if len(shown) == len(rows) else " (top %d of %d functions)" % (len(shown), len(rows))))
    table = [("self", "self%", "self " + label, "total", "total%", "total " + label, "function")]
    for r in shown:
        table.append(("{:,}".format(r["self"]), "%.1f%%" % (100.0 * r["self_w"] / total_w), fmt(r["self_w"]),
                      "{:,}".format(r["total"]), "%.1f%%" % (100.0 * r["total_w"] / total_w),
                      fmt(r["total_w"]),
                      r["function"] + ("  (%s)" % r["file"] if r["file"] else "")))
    widths = [max(len(row[i]) for row in table) for i in range(6)]
    for row in table:
        print("  ".join(row[i].rjust(widths[i]) for i in range(6)) + "  " + row[6])
    return cli.exit_status(trace)
