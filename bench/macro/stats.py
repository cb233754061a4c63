"""stats: turns the raw runs (one dict per workload x round x side) into the
figures RESULTS.md reports. A ratio is computed inside each round (side /
plain of the same round, run minutes apart) and the median over rounds is
reported with the lowest and highest round, so drift on the shared machine
cancels instead of landing on one side."""
import statistics


def value(metrics, key):
    """metrics[key]; a callable key computes the value from the metrics."""
    return key(metrics) if callable(key) else metrics.get(key)


def by_round(runs, workload, side, key):
    out = {}
    for r in runs:
        if r["workload"] == workload and r["side"] == side:
            v = value(r["metrics"], key)
            if v is not None:
                out[r["round"]] = v
    return out


def _summary(values):
    if not values:
        return None
    return {"median": statistics.median(values), "lo": min(values), "hi": max(values), "n": len(values)}


def ratio(runs, workload, side, key):
    """Median over rounds of side/plain, with the range; None without data."""
    base = by_round(runs, workload, "plain", key)
    mine = by_round(runs, workload, side, key)
    return _summary([mine[r] / base[r] for r in mine if r in base and base[r]])


def delta(runs, workload, side, key):
    """Median over rounds of side - plain."""
    base = by_round(runs, workload, "plain", key)
    mine = by_round(runs, workload, side, key)
    return _summary([mine[r] - base[r] for r in mine if r in base])


def absolute(runs, workload, side, key):
    return _summary(list(by_round(runs, workload, side, key).values()))


def recorder_share(metrics):
    """Fraction of the server's CPU spent on flightrec's own threads."""
    threads = metrics.get("recorder_thread_cpu_s")
    total = metrics.get("server_cpu_s")
    if threads is None or not total:
        return None
    return sum(threads.values()) / total


def drops(metrics):
    fr = metrics.get("flightrec")
    return None if fr is None else sum(fr["dropped"].values())


def events(metrics):
    fr = metrics.get("flightrec")
    return None if fr is None else sum(fr["events"].values())


def ratio_vs_both_plains(runs, workload, side, key):
    """Median over rounds of side / geometric mean of the round's plain and
    plain-again runs: two baseline measurements per round instead of one."""
    base = by_round(runs, workload, "plain", key)
    again = by_round(runs, workload, "plain-again", key)
    mine = by_round(runs, workload, side, key)
    return _summary([mine[r] / (base[r] * again[r]) ** 0.5 for r in mine
                     if r in base and r in again and base[r] and again[r]])


def ratio_of_medians(runs, workload, side, key):
    """The side's median over rounds / plain's median over rounds (unpaired)."""
    base = list(by_round(runs, workload, "plain", key).values())
    mine = list(by_round(runs, workload, side, key).values())
    if not base or not mine:
        return None
    r = statistics.median(mine) / statistics.median(base)
    return {"median": r, "lo": r, "hi": r, "n": 1}
