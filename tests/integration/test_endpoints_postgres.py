"""Endpoint names on a real PostgreSQL server under the preload (issue 41):
the backends (forked by the postmaster, nothing in them changed) name each
request by its frontend message and first keyword, and the counts are
exactly what pgbench sent, in the simple and the extended protocol."""
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from test_downstream import Postgres, pg_bin

CLIENTS, TRANSACTIONS = 2, 40


@pytest.fixture
def pg_trace():
    """A trace directory the postgres user owns (0700), outside root's
    private temporary directories, which that user could not walk."""
    d = tempfile.mkdtemp(prefix="flightrec-pgtrace-")
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(d, pw.pw_uid, pw.pw_gid)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("protocol,name", [("simple", "Query SELECT"), ("extended", "Parse SELECT")])
def test_pgbench_requests_named_and_counted_exactly(fr, tmp_path, pg_trace, protocol, name):
    pg = Postgres(env=fr.env(pg_trace, {"FLIGHTREC_OUTPUT": pg_trace}))
    try:
        script = tmp_path / "one.sql"
        script.write_text("SELECT 1;\n")
        os.chmod(tmp_path, 0o755)
        os.chmod(script, 0o644)
        bench = subprocess.run([pg_bin("pgbench"), "-n", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
                                "-c", str(CLIENTS), "-t", str(TRANSACTIONS), "-M", protocol, "-f", str(script),
                                "postgres"], capture_output=True, text=True, timeout=300)
        assert bench.returncode == 0, bench.stdout + bench.stderr
        assert "number of transactions actually processed: %d" % (CLIENTS * TRANSACTIONS) in bench.stdout
    finally:
        pg.stop()  # fast shutdown: every backend exits and seals its segment
    doc = fr.dump_json("requests", "--by", "endpoint", "--json", "--role", "server", pg_trace)
    counts = {r["endpoint"]: r["count"] for r in doc["endpoints"]}
    # One request per transaction, named by message and first keyword only.
    print(protocol, counts)
    assert counts.get(name) == CLIENTS * TRANSACTIONS, counts
    assert not [e for e in counts if "1" in e], counts  # never the statement's text
