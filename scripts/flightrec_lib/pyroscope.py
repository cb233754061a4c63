"""pyroscope: what `flightrec-dump pprof --push URL` sends to Pyroscope's
/ingest: one request per process, its pprof (cmd_pprof.encode) as the
multipart form file `profile`, with name=SERVICE{host=HOST,pid=PID},
from/until (Unix seconds) and format=pprof in the query. Pyroscope knows the
Go sample types cpu, alloc and live use (samples/cpu, alloc_*, inuse_*);
offcpu's are described in a `sample_type_config` form file, as its HTTP API
documents for custom types."""
import json
import math
import os
import re
import urllib.parse

from . import profiles

INGEST_PATH = "/ingest"
SAMPLE_TYPE_CONFIG = {
    "offcpu": {
        "offcpu": {"units": "samples", "aggregation": "sum", "display-name": "offcpu_nanoseconds",
                   "sampled": False},
        "samples": {"units": "samples", "aggregation": "sum", "display-name": "offcpu_samples",
                    "sampled": False},
    },
}
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def per_process(profile):
    """[(process key, Profile)]: the profile split by (host, service, pid)."""
    groups = {}
    for e in profile.entries:
        groups.setdefault(e.process, []).append(e)
    out = []
    for key, entries in groups.items():
        p = profiles.Profile(profile.kind)
        p.entries = entries
        p.period = profile.period
        p.start_wall_ns = min(e.first_time for e in entries)
        p.end_wall_ns = max(profile.end_wall_ns, p.start_wall_ns)
        out.append((key, p))
    return out


def _label(text):
    return _LABEL_UNSAFE.sub("_", str(text)) or "unknown"


def app_name(key, exe=None):
    host, service, pid = key
    service = service or (os.path.basename(exe) if exe else "") or "flightrec"
    # Pyroscope appends the profile type to the name (SERVICE.cpu{...}).
    return "%s{host=%s,pid=%s}" % (_label(service), _label(host or "unknown"), _label(pid))


def ingest_url(url, key, profile, exe=None):
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith(INGEST_PATH):
        path += INGEST_PATH
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    query += [("name", app_name(key, exe)),
              ("from", str(profile.start_wall_ns // 10 ** 9)),
              ("until", str(max(profile.start_wall_ns // 10 ** 9 + 1, math.ceil(profile.end_wall_ns / 1e9)))),
              ("format", "pprof")]
    return urllib.parse.urlunsplit(parts._replace(path=path, query=urllib.parse.urlencode(query)))


def multipart(pprof_bytes, kind):
    """(body, content type) of the form: `profile` and, for custom sample
    types, `sample_type_config`."""
    boundary = "flightrec-" + os.urandom(12).hex()
    parts = [("profile", "profile.pb.gz", "application/octet-stream", pprof_bytes)]
    if kind in SAMPLE_TYPE_CONFIG:
        parts.append(("sample_type_config", "sample_type_config.json", "application/json",
                      json.dumps(SAMPLE_TYPE_CONFIG[kind]).encode()))
    body = bytearray()
    for name, filename, ctype, data in parts:
        body += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\n"
                 "Content-Type: %s\r\n\r\n" % (boundary, name, filename, ctype)).encode()
        body += data
        body += b"\r\n"
    body += ("--%s--\r\n" % boundary).encode()
    return bytes(body), "multipart/form-data; boundary=%s" % boundary
