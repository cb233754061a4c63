"""What identifying data a trace holds: the command line (FLIGHTREC_RECORD_CMDLINE),
the environment (FLIGHTREC_RECORD_ENV, off by default), and credentials,
which must never reach the trace or flightrec's own log lines."""
import os

SECRETS = {
    "APP_API_TOKEN": "tok-4f9a1c7e",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMIK7MDENGbPxRfiCYSECRETLEAK",
    "DB_PASSWORD": "pw-hunter2-77",
}
URL_PASSWORD = "urlpw-5150"
ARG_PASSWORD = "argpw-8086"
ARG_TOKEN = "argtok-6502"


def secret_values():
    return list(SECRETS.values()) + [URL_PASSWORD, ARG_PASSWORD, ARG_TOKEN]


def run_with_secrets(fr, out, extra_env):
    env = dict(SECRETS)
    env["DATABASE_URL"] = f"postgres://app:{URL_PASSWORD}@db.internal:5432/app"
    env["VISIBLE_SETTING"] = "plain-value-42"
    env.update(extra_env)
    cmd = [fr.program("crash_test"), "none", f"--password={ARG_PASSWORD}", "--token", ARG_TOKEN, "--port=8080"]
    return fr.run(cmd, out, env=env)


def whole_trace_text(fr, out):
    """Every decoded event as JSON text, plus the raw segment bytes."""
    text = fr.dump_run("events", "--json", out).stdout
    raw = b"".join(open(p, "rb").read() for p in fr.segments(out))
    return text, raw


def assert_no_secret(text, raw, where):
    for s in secret_values():
        assert s not in text, f"{s!r} leaked into {where}"
        assert s.encode() not in raw, f"{s!r} leaked into the raw segment bytes"


def test_environment_is_off_by_default_and_cmdline_is_redacted(fr, trace_dir):
    proc = run_with_secrets(fr, trace_dir, {})
    assert fr.events(trace_dir, "process.env") == []
    starts = fr.events(trace_dir, "process.start")
    assert starts
    cmdline = starts[0]["cmdline"]
    assert cmdline.endswith("crash_test none --password=[redacted] --token [redacted] --port=8080"), cmdline
    text, raw = whole_trace_text(fr, trace_dir)
    assert_no_secret(text + proc.stderr, raw, "the trace or stderr")


def test_record_env_records_the_environment_with_credentials_redacted(fr, trace_dir):
    run_with_secrets(fr, trace_dir, {"FLIGHTREC_RECORD_ENV": "1"})
    env = {e["name"]: e["value"] for e in fr.events(trace_dir, "process.env")}
    # An allow-list: only names known to be harmless keep their values; any
    # other variable is there by name only.
    assert env["PATH"] == os.environ["PATH"]
    assert env["FLIGHTREC_RECORD_ENV"] == "1"
    for name in list(SECRETS) + ["VISIBLE_SETTING", "DATABASE_URL"]:
        assert env[name] == "[redacted]", (name, env[name])
    text, raw = whole_trace_text(fr, trace_dir)
    assert_no_secret(text, raw, "the trace")


def test_cmdline_can_be_left_out(fr, trace_dir):
    run_with_secrets(fr, trace_dir, {"FLIGHTREC_RECORD_CMDLINE": "0"})
    assert all(s["cmdline"] == "" for s in fr.events(trace_dir, "process.start"))


def test_s3_credentials_never_reach_the_log(fr, trace_dir):
    # Debug logging, an unreachable endpoint and a crash: every path that
    # prints something about S3 or the process runs, and none names a secret.
    env = {"FLIGHTREC_LOG": "debug", "FLIGHTREC_S3_BUCKET": "leak-test", "FLIGHTREC_RECORD_ENV": "1",
           "FLIGHTREC_S3_ENDPOINT": "http://127.0.0.1:9", "FLIGHTREC_UPLOAD_SHUTDOWN_MS": "300",
           "AWS_ACCESS_KEY_ID": "AKIALEAKTEST12345678"}
    env.update(SECRETS)
    proc = fr.run([fr.program("crash_test"), "segv", f"--password={ARG_PASSWORD}"], trace_dir, env=env, check=False)
    assert proc.returncode != 0
    assert "flightrec" in proc.stderr  # debug logging did print
    for s in secret_values() + ["AKIALEAKTEST12345678"]:
        assert s not in proc.stderr, f"{s!r} in flightrec's log"
    text, raw = whole_trace_text(fr, trace_dir)
    assert_no_secret(text, raw, "the trace of a crash")


# Issue #29 item 14: what a deny-list by name let through.
GAP_SECRETS = ["dbpass-31337", "redispass-2718", "ghp_tok1618", "pg/pw-1414", "FwoGZXIvYXdzEXAMPLETOKEN",
               "sigvalue-4242", "requirepw-1732", "mysqlpw-2236", "redisclipw-1123", "curlpw-5813",
               "bearertok-2134", "passopt-8955"]


def test_env_and_argv_redaction_gaps_are_closed(fr, trace_dir):
    (dbpass, redispass, ghp, pgpw, token, sig, requirepw, mysqlpw, redisclipw, curlpw, bearer, passopt) = GAP_SECRETS
    env = {"FLIGHTREC_RECORD_ENV": "1", "DB_PASS": dbpass, "REDIS_PASS": redispass,
           "REPO_URL": f"https://{ghp}@github.example/o/r.git", "LANG": "C.UTF-8"}
    presigned = f"https://b.s3.amazonaws.com/k?X-Amz-Security-Token={token}&X-Amz-Signature={sig}&X-Amz-Expires=60"
    args = ["none", "--requirepass", requirepw, f"-p{mysqlpw}", "-a", redisclipw, "-u", f"admin:{curlpw}",
            f"--header=Authorization: Bearer {bearer}", "--pass", passopt, f"postgres://u:{pgpw}@db/x",
            presigned, f"https://{ghp}@github.example/o/r.git", "--port=8080"]
    fr.run([fr.program("crash_test")] + args, trace_dir, env=env)
    recorded = {e["name"]: e["value"] for e in fr.events(trace_dir, "process.env")}
    assert recorded["LANG"] == "C.UTF-8"
    for name in ("DB_PASS", "REDIS_PASS", "REPO_URL"):
        assert recorded[name] == "[redacted]", (name, recorded[name])
    cmdline = fr.events(trace_dir, "process.start")[0]["cmdline"]
    assert cmdline.endswith(
        "crash_test none --requirepass [redacted] -p[redacted] -a [redacted] -u admin:[redacted] "
        "--header=Authorization: [redacted] --pass [redacted] postgres://u:[redacted]@db/x "
        "https://b.s3.amazonaws.com/k?X-Amz-Security-Token=[redacted]&X-Amz-Signature=[redacted]&X-Amz-Expires=60 "
        "https://[redacted]@github.example/o/r.git --port=8080"), cmdline
    text, raw = whole_trace_text(fr, trace_dir)
    for s in GAP_SECRETS:
        assert s not in text, f"{s!r} leaked into the trace"
        assert s.encode() not in raw, f"{s!r} leaked into the raw segment bytes"
