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
    assert cmdline.endswith("crash_test none --password=<redacted> --token <redacted> --port=8080"), cmdline
    text, raw = whole_trace_text(fr, trace_dir)
    assert_no_secret(text + proc.stderr, raw, "the trace or stderr")


def test_record_env_records_the_environment_with_credentials_redacted(fr, trace_dir):
    run_with_secrets(fr, trace_dir, {"FLIGHTREC_RECORD_ENV": "1"})
    env = {e["name"]: e["value"] for e in fr.events(trace_dir, "process.env")}
    assert env["VISIBLE_SETTING"] == "plain-value-42"
    assert env["PATH"] == os.environ["PATH"]
    for name in SECRETS:
        assert env[name] == "<redacted>", (name, env[name])
    assert env["DATABASE_URL"] == "postgres://app:<redacted>@db.internal:5432/app"
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
