"""load: puts segments into ClickHouse for fleet-wide reports (issue 42;
docs/FLEET.md). `load --clickhouse URL PATH|s3://...` loads every sealed
segment not loaded yet (fleet_load.py: idempotent, batched, streaming);
--workers N loads with N processes, --shard I/N takes this machine's share
of the segments, --watch keeps loading new ones. Exit status: 0 all loaded,
1 some input unreadable (the rest loaded), 2 usage, 4 the server failed."""
import re
import time

from .. import cli, fleet_db


def register(subparsers):
    p = subparsers.add_parser("load", help="load segments into ClickHouse (--clickhouse URL) for fleet reports")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="segment files, directories holding them, or s3://bucket/prefix")
    p.add_argument("--clickhouse", metavar="URL", required=True,
                   help="clickhouse://[user[:password]@]host[:port][/database]")
    p.add_argument("--cluster", metavar="NAME",
                   help="a cluster of the server's remote_servers: tables on every shard, inserts "
                        "through Distributed tables")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="loader processes (default 1)")
    p.add_argument("--shard", metavar="I/N", help="only this machine's share: segments whose name hashes to I of N")
    p.add_argument("--watch", type=float, default=None, metavar="SECONDS",
                   help="keep loading new segments, looking again every SECONDS")
    p.set_defaults(func=run)


def run(args):
    if args.workers < 1 or args.workers > 64:
        raise cli.UsageError("--workers must be between 1 and 64")
    shard = None
    if args.shard:
        m = re.match(r"^(\d+)/(\d+)$", args.shard)
        if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
            raise cli.UsageError("bad --shard %r: use I/N with 0 <= I < N, e.g. 0/4" % args.shard)
        shard = (int(m.group(1)), int(m.group(2)))
    if args.watch is not None and args.watch <= 0:
        raise cli.UsageError("--watch takes a positive number of seconds")
    from .. import fleet_load
    try:
        target = fleet_db.Target(args.clickhouse, args.cluster)
        paths, errors = cli._fetch_remote(args.paths)
        for path, message in errors:
            cli.err_file(path, message)
        status = fleet_load.run_load(target, paths, args.workers, shard)
        while args.watch is not None:
            time.sleep(args.watch)
            paths, _ = cli._fetch_remote(args.paths)
            status = fleet_load.run_load(target, paths, args.workers, shard, quiet_if_none=True) or status
        return 1 if (status or errors) else 0
    except fleet_db.FleetError as e:
        cli.err(str(e))
        return 4
