"""crash_report: the crashes and the processes ended by a signal that `info`
lists, made from event dicts (crash, crash.recovered, process.killed as
Trace.events gives them). One module for both of info's sources: the
segment files (commands/cmd_info.py) and a ClickHouse fleet database
(fleet_incidents.py), so both print the same lists."""
from . import profiles

CRASH_EVENT = "crash"
RECOVERED_EVENT = "crash.recovered"
KILLED_EVENT = "process.killed"


def crashes(crash_events, recovered_events):
    """Crash events (the host died on a fatal signal) with readable stacks.
    A crash followed by crash.recovered on its thread (the program's own
    handler returned and it went on, as a JVM does with a null check) is a
    recovered fault, not a crash: it is listed with "recovered": True.
    Both iterables in time order."""
    recovered = {}
    for e in recovered_events:
        key = (e.get("pid"), e.get("tid"), e.get("signal_name"))
        recovered.setdefault(key, []).append(e.get("time") or 0)
    out = []
    for e in crash_events:
        key = (e.get("pid"), e.get("tid"), e.get("signal_name"))
        went_on = any(t >= (e.get("time") or 0) for t in recovered.get(key, []))
        frames = e.get("stack") or []
        out.append({
            "pid": e.get("pid"), "tid": e.get("tid"), "time_ns": e.get("time"),
            "signal": e.get("signal_name") or e.get("signal"), "code": e.get("code"),
            "fault_addr": e.get("fault_addr"), "recovered": went_on,
            "stack": [{"function": profiles.frame_label(f), "file": f.get("file") or "",
                       "line": f.get("line") or 0} for f in frames],
        })
    return out


def killed(killed_events):
    """Processes ended by a termination signal left at its default action
    (SIGTERM, SIGINT, SIGPIPE, ...): which signal, when, on which thread, and
    for a signal another process sent, that process's pid and uid."""
    out = []
    for e in killed_events:
        sent = (e.get("code") or 0) <= 0 and e.get("sender_pid")
        out.append({"pid": e.get("pid"), "tid": e.get("tid"), "time_ns": e.get("time"),
                    "signal": e.get("signal_name") or e.get("signal"), "code": e.get("code"),
                    "sender_pid": e.get("sender_pid") if sent else None,
                    "sender_uid": e.get("sender_uid") if sent else None})
    return out
