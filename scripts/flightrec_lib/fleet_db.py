"""fleet_db: the connection to a ClickHouse server holding a fleet's traces
(issue 42, docs/FLEET.md) and the schema it holds: URL parsing (credentials
never shown), name validation, one clear error line for a server that is
down or refuses a query, and the CREATE TABLE statements (local tables, and
with --cluster the same tables on every shard plus Distributed tables over
them).

Values never go into SQL as text: queries take %(name)s parameters, which
clickhouse-driver sends as escaped literals; only validated identifiers
(database, cluster, table names) are formatted into statements.

Works with Debian's ClickHouse 18.16 and current releases: no DateTime64 (times
are Int64 nanoseconds since the epoch), no LowCardinality (experimental in
18.16), the MergeTree `PARTITION BY ... ORDER BY ...` syntax of both."""
import re
import urllib.parse
import zlib

DEFAULT_PORT = 9000
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

# Tables, in the order they are created. Each: (name, columns, engine, order by).
_COMMON = """load_id UInt64, proc_id UInt64, host String, service String, pid UInt32"""
_DAY = "day Date DEFAULT toDate(toDateTime(intDiv(time, 1000000000)))"
# Ledger columns added after the first release (ALTER TABLE ... ADD COLUMN on
# older databases; their rows keep the defaults, which the reports recognise:
# shift_ns 0 = loaded before them). shift_ns: the segment's wall minus
# monotonic clock (its header's anchors); mono_first/mono_last: its first and
# last event on the monotonic clock (has_times 0: no events); type_names/
# type_counts: its events per type; dropped_kinds/dropped_counts: what the
# recorder lost (Trace.dropped's rule, per segment); info: `info --json`'s
# segment entry (path as the file name); typed: 1 when the segment's crash,
# crash.recovered, process.killed and trigger events went into the `crashes`
# and `incidents` tables (0: loaded before those tables, into `events`).
_LEDGER_ADDED = """shift_ns Int64, mono_first Int64, mono_last Int64, has_times UInt8, type_names Array(String),
        type_counts Array(UInt64), dropped_kinds Array(String), dropped_counts Array(UInt64), info String,
        typed UInt8"""
# Request columns added since (the same ALTER on older databases; their rows
# keep the defaults: no parent, outcome ''). A client exchange's row says
# what downstream.py's rule made of it at load time (issue 45): downstream
# 'attributed' with parent_req_id = the req_id of the server request it was
# made for, or 'ambiguous' / 'outside' / 'other_thread' with parent 0;
# server rows ''.
_REQUESTS_ADDED = """parent_req_id UInt64, downstream String"""
_THREADS_ADDED = "extra String"
# Columns added to tables after the first release: create_schema adds them to
# an older database (ALTER TABLE ... ADD COLUMN; old rows get the default).
_ADDED = {"segments": _LEDGER_ADDED, "requests": _REQUESTS_ADDED, "threads": _THREADS_ADDED}
# The event types of the `crashes` and `incidents` tables (ledger column typed).
CRASH_TYPES = ("crash", "crash.recovered", "process.killed")
TRIGGER_TYPE = "trigger"
TYPED_VERSION = 1

TABLES = [
    ("segments", """seg_name String, crc_head UInt32, crc_tail UInt32, size UInt64, load_id UInt64,
        proc_id UInt64, host String, service String, pid UInt32, sequence UInt64, state String,
        first_ns Int64, last_ns Int64, events UInt64, loaded_ns Int64, problems UInt32, """ + _LEDGER_ADDED + """,
        day Date DEFAULT toDate(toDateTime(intDiv(first_ns, 1000000000)))""",
     "MergeTree", "day", "(seg_name, crc_head, crc_tail)"),
    ("processes", _COMMON + """, time Int64, exe String, names Array(String), values Array(String), """ + _DAY,
     "MergeTree", "day", "(service, host, pid)"),
    # extra: a thread.start's other fields (parent_tid, start_routine, ...) as
    # a JSON object, for info --json's thread list ('' for the other types).
    ("threads", _COMMON + """, time Int64, tid UInt32, type String, name String, """ + _THREADS_ADDED + ", " + _DAY,
     "MergeTree", "day", "(service, host, pid, time)"),
    ("stacks", """stack_id UInt64, depth UInt16, frames Nested(function String, short String, file String,
        line UInt32, module String, build_id String, address UInt64, map_start UInt64, map_end UInt64,
        map_offset UInt64, mapped UInt8, inlined UInt8)""",
     "ReplacingMergeTree", None, "stack_id"),
    # kind: 1 cpu, 2 offcpu, 3 alloc (KIND_CODES). stack_id 0: no stack; 1: the
    # unattributed pseudo-frame (samples dropped in the recorder's rings; cpu
    # weight 0, weighed by the period at query time). request_id, endpoint,
    # trace_id: the request a sample fell in (defaults until issue 41 lands).
    ("samples", _COMMON + """, time Int64, tid UInt32, kind UInt8, samples UInt32, weight Float64,
        objects Float64, stack_id UInt64, period UInt64, address UInt64, size UInt64,
        request_id UInt64 DEFAULT 0, endpoint String DEFAULT '', trace_id String DEFAULT '', """ + _DAY,
     "MergeTree", "day", "(kind, service, host, time)"),
    # Requests (exchanges with bytes both ways), derived per segment at load
    # time by the file reader's own code (request_inference.py): time is the
    # start on the wall clock, start_mono on the process's monotonic clock (as
    # the file reader reports it). req_id: content id of the request, which
    # samples that fell in it carry (samples.request_id).
    ("requests", _COMMON + """, time Int64, start_mono Int64, tid UInt32, conn UInt64, role String,
        duration Int64, bytes_in UInt64, bytes_out UInt64, endpoint String, trace_id String, parent_span String,
        sampled UInt8, request_id String, has_trace UInt8, req_id UInt64, """ + _REQUESTS_ADDED + """, """ + _DAY,
     "MergeTree", "day", "(service, host, time)"),
    # Socket connections: one row per connection and segment, the partial the
    # file reader's sockets code (socket_conns.collect) builds from one
    # segment; the sockets report merges them (GROUP BY pid, conn). Times on
    # the monotonic clock; -1 = none. kind 1: the segment's calls that had no
    # connection (a failed socket()): only ops and errors.
    ("socket_conns", _COMMON + """, time Int64, kind UInt8, conn UInt64, role String, family String,
        sock_type String, local String, peer String, listener UInt64, fd Int64, tid Int64, desc_time Int64,
        open_ns Int64, close_ns Int64, first_ns Int64, last_ns Int64, bytes_in UInt64, bytes_out UInt64, ops UInt64,
        errors UInt64, eagain UInt64, op_names Array(String), op_counts Array(UInt64), err_names Array(String),
        err_counts Array(UInt64), durations Array(Int64), exchanges UInt64, gap UInt8, summarized_ops UInt64,
        acceptq UInt8, aq_samples UInt64, aq_max_queued UInt64, aq_backlog UInt64, aq_full UInt64, """ + _DAY,
     "MergeTree", "day", "(service, host, pid, conn)"),
    ("frees", _COMMON + """, time Int64, tid UInt32, address UInt64, """ + _DAY,
     "MergeTree", "day", "(service, host, pid, time)"),
    # Crashes (crash, crash.recovered) and processes ended by a signal
    # (process.killed), one row per event with every field the runtime writes
    # (NULL: the segment's schema lacks it) and the crash's whole stack
    # (stack_id into `stacks`). time: wall clock; mono: the process's
    # monotonic clock (as the file reader reports it); sequence, seg_name,
    # ord (the event's place in its segment): the file reader's order at equal
    # times.
    ("crashes", _COMMON + """, time Int64, mono Int64, type String, tid Nullable(Int64), signal Nullable(Int64),
        signal_name Nullable(String), code Nullable(Int64), fault_addr Nullable(UInt64), sender_pid Nullable(Int64),
        sender_uid Nullable(Int64), stack_id UInt64, sequence UInt64, seg_name String, ord UInt32, """ + _DAY,
     "MergeTree", "day", "(service, host, pid, time)"),
    # Incidents: one row per `trigger` event (a crash, `flightrec-dump trigger`,
    # a slow request, memory above a limit asked the recorder to keep its
    # window); incidents.group makes incidents of them as from files.
    ("incidents", _COMMON + """, time Int64, mono Int64, reason Nullable(String), detail Nullable(Int64),
        note Nullable(String), incident Nullable(Int64), before_ns Nullable(Int64), after_ns Nullable(Int64),
        merged Nullable(Int64), suppressed Nullable(Int64), mode Nullable(String), tag Nullable(String),
        sequence UInt64, seg_name String, ord UInt32, """ + _DAY,
     "MergeTree", "day", "(service, host, pid, time)"),
    # Every other event (sockets, exchanges, counters), field by field as text.
    ("events", _COMMON + """, time Int64, tid UInt32, type String, names Array(String), values Array(String),
        endpoint String DEFAULT '', trace_id String DEFAULT '', """ + _DAY,
     "MergeTree", "day", "(type, service, host, time)"),
]
KIND_CODES = {"cpu": 1, "offcpu": 2, "alloc": 3}
TABLE_NAMES = [t[0] for t in TABLES]


class FleetError(Exception):
    """One clear line for the user (bad URL, server down, query refused)."""


def check_name(name, what):
    if not isinstance(name, str) or not _NAME.match(name):
        raise FleetError("bad %s name %r: use letters, digits and _ (at most 63, not starting with a digit)" % (
            what, name))
    return name


class Target:
    """A parsed --clickhouse URL: clickhouse://[user[:password]@]host[:port][/database]."""

    def __init__(self, url, cluster=None):
        try:
            u = urllib.parse.urlsplit(url)
            port = u.port
        except ValueError as e:
            raise FleetError("bad --clickhouse URL %s: %s" % (redact(url), e)) from None
        if u.scheme not in ("clickhouse", "tcp") or not u.hostname:
            raise FleetError("bad --clickhouse URL %s: use clickhouse://[user[:password]@]host[:port][/database]"
                             % redact(url))
        self.host = u.hostname
        self.port = port or DEFAULT_PORT
        self.user = urllib.parse.unquote(u.username) if u.username else "default"
        self.password = urllib.parse.unquote(u.password) if u.password else ""
        db = u.path.strip("/") or "default"
        self.database = check_name(db, "database")
        self.cluster = check_name(cluster, "cluster") if cluster else None
        self.shown = redact(url)

    def table(self, name, local=False):
        """The table a query reads or an insert writes: with a cluster, the
        Distributed table (name) unless local (name_local)."""
        assert name in TABLE_NAMES
        if self.cluster and local:
            return "%s.%s_local" % (self.database, name)
        return "%s.%s" % (self.database, name)


def redact(url):
    """The URL with any password (and user) left out, for messages."""
    try:
        u = urllib.parse.urlsplit(url)
        if u.username is None and u.password is None:
            return url
        host = u.hostname or ""
        if u.port:
            host = "%s:%d" % (host, u.port)
        return urllib.parse.urlunsplit((u.scheme, "***@" + host, u.path, "", ""))
    except ValueError:
        return "<the --clickhouse URL>"


class Connection:
    """A client with errors turned into FleetError (one line, no credentials)."""

    def __init__(self, target, timeout=300):
        try:
            from clickhouse_driver import Client
        except ImportError:
            raise FleetError("--clickhouse needs the Python ClickHouse driver (Debian: python3-clickhouse-driver)") \
                from None
        # The driver logs each failed connection attempt with a traceback; the
        # failure reaches the user once, as FleetError's line.
        import logging
        logging.getLogger("clickhouse_driver").addHandler(logging.NullHandler())
        logging.getLogger("clickhouse_driver").propagate = False
        self.target = target
        self.pending = False  # an insert_start not yet waited for: "sample" or "end" (what to read)
        self.insert_types = {}  # INSERT statement -> its columns' (name, type), from its first sample block
        settings = {"max_block_size": 65536}
        if target.cluster:
            # Inserts through a Distributed table return once every shard has its
            # rows, so a load that ends has loaded (and the ledger follows the data).
            settings["insert_distributed_sync"] = 1
        self.client = Client(target.host, port=target.port, user=target.user, password=target.password,
                             database="default", connect_timeout=10, send_receive_timeout=timeout,
                             sync_request_timeout=10, settings=settings)

    def execute(self, sql, params=None, **kw):
        self.insert_wait()
        try:
            return self.client.execute(sql, params, **kw)
        except Exception as e:
            raise FleetError(_describe(self.target, e)) from None

    def execute_iter(self, sql, params=None):
        try:
            yield from self.client.execute_iter(sql, params, settings={"max_block_size": 65536})
        except FleetError:
            raise
        except Exception as e:
            raise FleetError(_describe(self.target, e)) from None

    def insert_start(self, sql, columns):
        """Sends a columnar INSERT (one block; columns: one
        fleet_native.Column per column, in the statement's order) and returns without waiting for the server to
        store it: insert_wait does. The loader decodes the next segments
        meanwhile (on loopback the wait was the largest cost of a load). The
        driver's execute() would also copy every column (its insert_block_size
        slicing) and ping the server before each query."""
        from clickhouse_driver.block import ColumnOrientedBlock
        c = self.client
        try:
            if self.pending:
                self.insert_wait()
            if not getattr(c, "connection", None) or not c.connection.connected:
                c.establish_connection(None)  # connects (and pings), as execute() does
            conn = c.connection
            conn.send_query(sql)
            conn.send_external_tables(None)
            types = self.insert_types.get(sql)
            if types is None:  # the first insert of a statement: the server says the columns' types
                types = self.insert_types[sql] = c.receive_sample_block().columns_with_types
                self.pending = "end"
            else:  # the same statement again: its sample block is read in insert_wait
                self.pending = "sample"
            _send_columns(conn, types, columns)
            conn.send_data(ColumnOrientedBlock())  # end of data
        except FleetError:
            raise
        except Exception as e:
            self.pending = False
            c.disconnect()
            raise FleetError(_describe(self.target, e)) from None

    def insert_wait(self):
        """Waits until the server has stored the insert insert_start sent (its
        end of query); raises FleetError if it refused it."""
        if not self.pending:
            return
        pending, self.pending = self.pending, False
        try:
            if pending == "sample":
                self.client.receive_sample_block()
            self.client.receive_end_of_query()
        except Exception as e:
            self.client.disconnect()
            raise FleetError(_describe(self.target, e)) from None

    def close(self):
        self.pending = False
        try:
            self.client.disconnect()
        except Exception:
            pass


def _send_columns(conn, types, columns):
    """One Data packet of the columns (fleet_native.Column), as the driver's
    Connection.send_data writes one, but each column encoded by fleet_native
    (the driver's writers for the types it leaves to them)."""
    from clickhouse_driver import defines
    from clickhouse_driver.block import BlockInfo, ColumnOrientedBlock
    from clickhouse_driver.columns.service import write_column
    from clickhouse_driver.protocol import ClientPacketTypes, Compression
    from clickhouse_driver.varint import write_varint
    from clickhouse_driver.writer import write_binary_str
    from . import fleet_native
    n = columns[0].n if columns else 0
    if any(c.n != n for c in columns) or len(columns) != len(types):
        raise ValueError("columns of different lengths in one insert")
    if conn.compression != Compression.DISABLED:  # the driver's own path (it compresses)
        conn.send_data(ColumnOrientedBlock(types, [c.values() for c in columns]))
        return
    fout = conn.fout
    write_varint(ClientPacketTypes.DATA, fout)
    revision = conn.server_info.revision
    if revision >= defines.DBMS_MIN_REVISION_WITH_TEMPORARY_TABLES:
        write_binary_str("", fout)
    if revision >= defines.DBMS_MIN_REVISION_WITH_BLOCK_INFO:
        BlockInfo().write(fout)
    write_varint(len(columns), fout)
    write_varint(n, fout)
    for (name, ctype), col in zip(types, columns):
        write_binary_str(name, fout)
        write_binary_str(ctype, fout)
        try:
            fleet_native.write_column(fout, ctype, col, lambda items: write_column(
                conn.context, name, ctype, items, fout))
        except (OverflowError, TypeError, AttributeError) as e:
            raise ValueError("column %s (%s): %s" % (name, ctype, e)) from None
    fout.flush()


def _describe(target, e):
    name = type(e).__name__
    text = str(e).strip().splitlines()
    first = text[0] if text else name
    if len(text) > 1 and first.startswith("Code:"):
        first = "%s %s" % (first, text[1])
    first = first.split(". Stack trace")[0]
    if name in ("NetworkError", "SocketTimeoutError", "ConnectionRefusedError", "OSError", "EOFError") or \
            "Connection refused" in first or "timed out" in first:
        return "ClickHouse server %s:%d unreachable or not answering: %s" % (target.host, target.port, first)
    if target.password:
        first = first.replace(target.password, "***")
    return "ClickHouse %s:%d: %s" % (target.host, target.port, first)


def _create(name, columns, engine, partition, order, table, on_cluster=""):
    part = " PARTITION BY %s" % partition if partition else ""
    return "CREATE TABLE IF NOT EXISTS %s%s (%s) ENGINE = %s()%s ORDER BY %s" % (
        table, on_cluster, " ".join(columns.split()), engine, part, order)


def _add_columns(conn, target, local):
    """Older databases: the columns added since (_ADDED), one ALTER each."""
    for tname, added in sorted(_ADDED.items()):
        table = target.table(tname, local=local)
        db, name = table.split(".")
        have = {r[0] for r in conn.execute("SELECT name FROM system.columns WHERE database = %(d)s AND table = %(t)s",
                                           {"d": db, "t": name})}
        for col in added.split(","):
            cname, ctype = col.split()
            if cname not in have:
                conn.execute("ALTER TABLE %s ADD COLUMN %s %s" % (table, cname, ctype))


def ledger_has_times(conn):
    """Whether the ledger has the columns of _LEDGER_ADDED (loaded by this version or later)."""
    return ledger_has_column(conn, "shift_ns")


def ledger_has_column(conn, column):
    """Whether the ledger has the column (added by a later version: _LEDGER_ADDED)."""
    t = conn.target
    db, name = t.table("segments").split(".")
    return bool(conn.execute("SELECT count() FROM system.columns WHERE database = %(d)s AND table = %(t)s "
                             "AND name = %(c)s", {"d": db, "t": name, "c": column})[0][0])


def create_schema(conn):
    """Creates the database and tables if missing (on every shard with a cluster)."""
    t = conn.target
    if not t.cluster:
        conn.execute("CREATE DATABASE IF NOT EXISTS %s" % t.database)
        for name, cols, engine, part, order in TABLES:
            conn.execute(_create(name, cols, engine, part, order, t.table(name)))
        _add_columns(conn, t, False)
        return
    # 18.16 has ON CLUSTER only with ZooKeeper (distributed DDL): connect to each
    # shard in turn instead (they are listed in system.clusters).
    shards = conn.execute("SELECT host_address, port FROM system.clusters WHERE cluster = %(c)s",
                          {"c": t.cluster})
    if not shards:
        raise FleetError("no cluster %r in the server's remote_servers" % t.cluster)
    # Local tables on every shard, and the Distributed tables over them on
    # every shard too, so any server of the cluster answers the reports.
    for host, port in shards:
        sub = Target.__new__(Target)
        sub.__dict__.update(t.__dict__)
        sub.host, sub.port = host, port
        c = Connection(sub)
        try:
            c.execute("CREATE DATABASE IF NOT EXISTS %s" % t.database)
            for name, cols, engine, part, order in TABLES:
                c.execute(_create(name, cols, engine, part, order, t.table(name, local=True)))
            _add_columns(c, t, True)
            for name, cols, engine, part, order in TABLES:
                key = "cityHash64(seg_name)" if name == "segments" else (
                    "stack_id" if name == "stacks" else "rand()")
                c.execute("CREATE TABLE IF NOT EXISTS %s AS %s ENGINE = Distributed(%s, %s, %s_local, %s)" % (
                    t.table(name), t.table(name, local=True), t.cluster, t.database, name, key))
            _add_columns(c, t, False)
        finally:
            c.close()


def shard_of(name, n):
    """Which of n shards (--shard I/N) a segment name belongs to: stable across machines."""
    return zlib.crc32(name.encode("utf-8", "surrogateescape")) % n


def proc_id(host, service, pid):
    """The 64-bit id of a process (host, service, pid) used to filter by process."""
    import hashlib
    h = hashlib.blake2b(("%s\0%s\0%d" % (host or "", service or "", pid or 0)).encode("utf-8", "surrogateescape"),
                        digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1
