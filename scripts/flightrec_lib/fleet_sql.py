"""fleet_sql: SQL pieces every ClickHouse report builds its queries from
(fleet_reports.py, fleet_profiles.py, fleet_heap.py): nearest-rank
percentiles of a sorted array, sums of parallel key/count arrays per group,
and a shell pattern (--endpoint) as an RE2 regular expression. Below the
reports, so that the profile builder (opened by cli.py) does not import the
reports (docs/ARCHITECTURE.md, "The reader's layers")."""
import re


def percentiles(pcts):
    """SQL of nearest-rank percentiles (units.percentile) of a sorted array `d` of length `n`."""
    return ", ".join("d[toUInt64(greatest(1, ceil(%r * n)))]" % (p / 100.0) for p in pcts)


def sum_map(conn, table, keys, values, group, where, p):
    """{group values: {key: summed value}} of parallel arrays of string keys and
    counts (sumMap takes no String keys in ClickHouse 18.16: ARRAY JOIN, then GROUP BY)."""
    g = ", ".join(group)
    out = {}
    for row in conn.execute(
            "SELECT %s, k, sum(v) FROM %s ARRAY JOIN %s AS k, %s AS v WHERE %s GROUP BY %s, k ORDER BY k" % (
                g, table, keys, values, where, g), p):
        out.setdefault(tuple(row[:len(group)]), {})[row[-2]] = row[-1]
    return out


def glob_regex(pattern):
    """fnmatch.fnmatchcase's pattern as an RE2 regular expression (anchored)."""
    out, i = ["^"], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append("(?s:.*)")
        elif ch == "?":
            out.append("(?s:.)")
        elif ch == "[":
            j = pattern.find("]", i + 2 if i + 1 < len(pattern) and pattern[i + 1] in "!]" else i + 1)
            if j < 0:
                out.append("\\[")
            else:
                body = pattern[i + 1:j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[%s]" % body)
                i = j
        else:
            out.append(re.escape(ch) if not ch.isalnum() else ch)
        i += 1
    out.append("$")
    return "".join(out)
