"""clickhouse_server: starts private clickhouse-server processes for the fleet
tests and the fleet benchmark (issue 42). Each server listens on loopback
only, on free ports, with its own temporary data directory and config; it is
never a system service. One or more servers can share a `remote_servers`
cluster definition (the two-shard test of --cluster).

    with ClickHouseServers(2, cluster="fleet2") as servers:
        servers.url(0)  # clickhouse://127.0.0.1:PORT/default

Readiness is waited for by polling a real query (generous deadline, busy
machines are slow to start a server); a server that never comes up raises
with the tail of its log."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

SERVER = shutil.which("clickhouse-server") or "/usr/sbin/clickhouse-server"
START_DEADLINE = 180.0


def available():
    if not os.path.exists(SERVER):
        return False
    import importlib.util
    return importlib.util.find_spec("clickhouse_driver") is not None


def _die_with_parent():
    """preexec_fn: the server gets SIGKILL if the test process dies without
    stopping it (a killed pytest must not leave servers on a shared machine)."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_USERS = """<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage></default></profiles>
  <users>
    <default>
      <password>%(password)s</password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
"""

_CONFIG = """<?xml version="1.0"?>
<yandex>
  <logger><level>information</level><log>%(dir)s/server.log</log><errorlog>%(dir)s/error.log</errorlog>
    <size>100M</size><count>1</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>%(tcp)d</tcp_port>
  <http_port>%(http)d</http_port>
  <interserver_http_port>%(inter)d</interserver_http_port>
  <interserver_http_host>127.0.0.1</interserver_http_host>
  <max_connections>256</max_connections>
  <keep_alive_timeout>3</keep_alive_timeout>
  <max_concurrent_queries>50</max_concurrent_queries>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
  <mark_cache_size>268435456</mark_cache_size>
  <path>%(dir)s/data/</path>
  <tmp_path>%(dir)s/tmp/</tmp_path>
  <user_files_path>%(dir)s/user_files/</user_files_path>
  <format_schema_path>%(dir)s/format_schemas/</format_schema_path>
  <users_config>%(dir)s/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mlock_executable>false</mlock_executable>
  <remote_servers>%(clusters)s</remote_servers>
  <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
  <max_session_timeout>3600</max_session_timeout>
  <default_session_timeout>60</default_session_timeout>
</yandex>
"""


class ClickHouseServers:
    """n private servers; cluster: the name of a cluster with one shard per server."""

    def __init__(self, n=1, cluster=None, password=""):
        self.n = n
        self.cluster = cluster
        self.password = password
        self.root = None
        self.procs = []
        self.ports = []

    def url(self, i=0, database="default", with_password=True):
        cred = "default:%s@" % self.password if (self.password and with_password) else ""
        return "clickhouse://%s127.0.0.1:%d/%s" % (cred, self.ports[i][0], database)

    def __enter__(self):
        self.root = tempfile.mkdtemp(prefix="flightrec-ch-")
        self.ports = [(_free_port(), _free_port(), _free_port()) for _ in range(self.n)]
        clusters = ""
        if self.cluster:
            shards = "".join(
                "<shard><replica><host>127.0.0.1</host><port>%d</port><user>default</user>"
                "<password>%s</password></replica></shard>" % (p[0], self.password) for p in self.ports)
            clusters = "<%s>%s</%s>" % (self.cluster, shards, self.cluster)
        try:
            for i, (tcp, http, inter) in enumerate(self.ports):
                d = os.path.join(self.root, "s%d" % i)
                for sub in ("data", "tmp", "user_files", "format_schemas"):
                    os.makedirs(os.path.join(d, sub))
                with open(os.path.join(d, "users.xml"), "w") as f:
                    f.write(_USERS % {"password": self.password})
                with open(os.path.join(d, "config.xml"), "w") as f:
                    f.write(_CONFIG % {"dir": d, "tcp": tcp, "http": http, "inter": inter, "clusters": clusters})
                log = open(os.path.join(d, "stdout.log"), "w")
                self.procs.append(subprocess.Popen(
                    [SERVER, "--config-file=" + os.path.join(d, "config.xml")], cwd=d,
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                    preexec_fn=_die_with_parent))
                log.close()
            for i in range(self.n):
                self.wait_ready(i)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def client(self, i=0):
        from clickhouse_driver import Client
        return Client("127.0.0.1", port=self.ports[i][0], user="default", password=self.password,
                      connect_timeout=5, send_receive_timeout=300)

    def wait_ready(self, i, deadline=START_DEADLINE):
        end = time.monotonic() + deadline
        last = None
        while time.monotonic() < end:
            if self.procs[i].poll() is not None:
                break
            try:
                c = self.client(i)
                c.execute("SELECT 1")
                c.disconnect()
                return
            except Exception as e:  # not up yet
                last = e
                time.sleep(0.25)
        raise RuntimeError("clickhouse-server %d did not come up (%s); log tail:\n%s" % (
            i, last, self.log_tail(i)))

    def log_tail(self, i, n=4000):
        out = ""
        for name in ("stdout.log", "error.log"):
            p = os.path.join(self.root, "s%d" % i, name)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    out += f.read()[-n:]
        return out

    def stop(self, i):
        p = self.procs[i]
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(60)

    def restart(self, i):
        self.stop(i)
        d = os.path.join(self.root, "s%d" % i)
        log = open(os.path.join(d, "stdout.log"), "a")
        self.procs[i] = subprocess.Popen(
            [SERVER, "--config-file=" + os.path.join(d, "config.xml")], cwd=d,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_die_with_parent)
        log.close()
        self.wait_ready(i)

    def __exit__(self, *exc):
        for i in range(len(self.procs)):
            self.stop(i)
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)
        return False
