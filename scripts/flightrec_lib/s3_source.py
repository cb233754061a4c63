"""s3_source: read segments that flightrec's uploader shipped to S3.

    from .s3_source import is_s3_url, download_to_temp, list_and_fetch

    is_s3_url("s3://bucket/flightrec/api")        # True
    list_and_fetch("s3://bucket/flightrec/api")   # [(key, bytes)], sorted by key
    d = download_to_temp("s3://bucket/flightrec") # local dir of the segments; caller removes it
    Trace([d])                                    # read it like any directory

A URL names a bucket and a key prefix: s3://bucket (everything),
s3://bucket/flightrec/api/2024-05-01 (one service's day; a trailing '/' is
implied), or one object s3://bucket/.../x.seg. Only *.seg keys are fetched.

Same settings as the uploader (issue 6), through Debian's python3-botocore:
region FLIGHTREC_S3_REGION > AWS_REGION > AWS_DEFAULT_REGION > us-east-1;
endpoint FLIGHTREC_S3_ENDPOINT > AWS_ENDPOINT_URL_S3 > AWS_ENDPOINT_URL >
AWS; path-style for custom endpoints and dotted buckets unless
FLIGHTREC_S3_PATH_STYLE says otherwise; credentials from AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, then the shared credentials file
(AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE), as botocore resolves them.

Errors raise S3SourceError with one line naming the URL and the cause; never
a key, secret or token.
"""
import os
import shutil
import sys
import tempfile

if "/usr/lib/python3/dist-packages" not in sys.path:
    sys.path.append("/usr/lib/python3/dist-packages")  # Debian's botocore

SEGMENT_SUFFIX = ".seg"


class S3SourceError(Exception):
    """One clear line: which URL, what went wrong."""


def is_s3_url(path):
    return isinstance(path, str) and path.startswith("s3://")


def parse_s3_url(url):
    """'s3://bucket/a/b' -> ('bucket', 'a/b/'); a '*.seg' path stays an exact key."""
    if not is_s3_url(url):
        raise S3SourceError(f"{url}: not an s3:// URL")
    bucket, _, prefix = url[len("s3://"):].partition("/")
    if not bucket:
        raise S3SourceError(f"{url}: no bucket name")
    if prefix and not prefix.endswith(SEGMENT_SUFFIX) and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


def _first(env, *names):
    for name in names:
        if env.get(name):
            return env[name]
    return None


def _settings(bucket, env):
    region = _first(env, "FLIGHTREC_S3_REGION", "AWS_REGION", "AWS_DEFAULT_REGION") or "us-east-1"
    endpoint = _first(env, "FLIGHTREC_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
    forced = (env.get("FLIGHTREC_S3_PATH_STYLE") or "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        path_style = True
    elif forced in ("0", "false", "no", "off"):
        path_style = False
    else:
        path_style = bool(endpoint) or "." in bucket
    return region, endpoint, path_style


def make_client(bucket, env=None):
    """A botocore S3 client configured by the FLIGHTREC_S3_* / AWS_* rules."""
    env = os.environ if env is None else env
    try:
        import botocore.session
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError
    except ImportError:
        raise S3SourceError("reading s3:// needs python3-botocore (apt-get install python3-botocore)")
    region, endpoint, path_style = _settings(bucket, env)
    try:
        session = botocore.session.Session()
        if env is not os.environ:  # an explicit environment (tests, embedding) overrides the process's
            if env.get("AWS_PROFILE"):
                session.set_config_variable("profile", env["AWS_PROFILE"])
            if env.get("AWS_SHARED_CREDENTIALS_FILE"):
                session.set_config_variable("credentials_file", env["AWS_SHARED_CREDENTIALS_FILE"])
        creds = {}
        if env is not os.environ and env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
            creds = {"aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
                     "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
                     "aws_session_token": env.get("AWS_SESSION_TOKEN")}
        return session.create_client(
            "s3", region_name=region, endpoint_url=endpoint,
            config=Config(s3={"addressing_style": "path" if path_style else "virtual"},
                          retries={"mode": "standard", "max_attempts": 5},
                          connect_timeout=10, read_timeout=60),
            **creds)
    except BotoCoreError as e:
        raise S3SourceError(f"s3://{bucket}: {e}")


def _describe(e):
    """A one-line cause from a botocore exception, without request details."""
    from botocore.exceptions import ClientError, NoCredentialsError
    if isinstance(e, NoCredentialsError):
        return "no AWS credentials (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE)"
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
        return f"HTTP {status} {err.get('Code', '')}: {err.get('Message', '')}".strip()
    return str(e)


def list_segments(url, client=None, env=None):
    """Sorted keys of the *.seg objects the URL names."""
    from botocore.exceptions import BotoCoreError, ClientError
    bucket, prefix = parse_s3_url(url)
    client = client or make_client(bucket, env)
    try:
        if prefix.endswith(SEGMENT_SUFFIX):
            client.head_object(Bucket=bucket, Key=prefix)
            return [prefix]
        keys = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys.extend(o["Key"] for o in page.get("Contents", []) if o["Key"].endswith(SEGMENT_SUFFIX))
        return sorted(keys)
    except (BotoCoreError, ClientError) as e:
        raise S3SourceError(f"{url}: {_describe(e)}")


def list_and_fetch(url, client=None, env=None):
    """[(key, bytes)] for every *.seg object under the URL, sorted by key."""
    from botocore.exceptions import BotoCoreError, ClientError
    bucket, _ = parse_s3_url(url)
    client = client or make_client(bucket, env)
    out = []
    for key in list_segments(url, client):
        try:
            out.append((key, client.get_object(Bucket=bucket, Key=key)["Body"].read()))
        except (BotoCoreError, ClientError) as e:
            raise S3SourceError(f"s3://{bucket}/{key}: {_describe(e)}")
    return out


# Longest tail of a key kept in a local file name (NAME_MAX is 255 bytes).
_NAME_TAIL = 120


def local_name(index, key):
    """A flat local file name for the index-th key: unique (the index comes
    first), never a path (no '/', '.' or '..' components: keys `a/x.seg`,
    `a//x.seg` and `a/x.seg/b.seg` are all legal and must not collide or nest),
    short enough for any file system, and still ending in the key's last
    characters so a reader can tell the files apart."""
    tail = "".join(c if c.isalnum() or c in "-_." else "_" for c in key.replace("/", "_"))
    tail = tail[-_NAME_TAIL:].lstrip(".")
    if not tail.endswith(SEGMENT_SUFFIX):
        tail += SEGMENT_SUFFIX
    return "%06d-%s" % (index, tail)


def download_to_temp(url, dest=None, client=None, env=None):
    """Downloads the URL's segments into `dest` (default: a new temporary
    directory) as flat files named by local_name(), and returns the
    directory. Raises S3SourceError when nothing matches, so a typo is not
    silently an empty trace. The caller removes the directory when done; if
    this fails (any exception, an interrupt too), a directory it created is
    removed before the exception leaves."""
    from botocore.exceptions import BotoCoreError, ClientError
    bucket, _ = parse_s3_url(url)
    client = client or make_client(bucket, env)
    keys = list_segments(url, client)
    if not keys:
        raise S3SourceError(f"{url}: no segments (*.seg) under this prefix")
    created = dest is None
    dest = dest or tempfile.mkdtemp(prefix="flightrec-s3-")
    try:
        for i, key in enumerate(keys):
            path = os.path.join(dest, local_name(i, key))
            try:
                body = client.get_object(Bucket=bucket, Key=key)["Body"]
                with open(path + ".part", "xb") as f:
                    for chunk in iter(lambda: body.read(1 << 20), b""):
                        f.write(chunk)
                os.replace(path + ".part", path)
            except (BotoCoreError, ClientError) as e:
                raise S3SourceError(f"s3://{bucket}/{key}: {_describe(e)}")
            except OSError as e:
                raise S3SourceError(f"s3://{bucket}/{key}: cannot store a local copy: {e.strerror or e}")
    except BaseException:
        if created:
            shutil.rmtree(dest, True)
        raise
    return dest
