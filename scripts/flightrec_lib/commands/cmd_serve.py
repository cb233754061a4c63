"""serve: a local web viewer over the same sources the reports read (paths,
s3://bucket/prefix, or a ClickHouse database with --clickhouse URL): find traces, look at one selection (flame graph,
top, timeline, requests, sockets, heap, crashes, incidents), compare two,
save any view as one HTML file. The pages are built by the reports' own
code (viewer_views.py); the server is viewer_server.py; docs/VIEWER.md."""
from .. import cli, viewer_server


def register(subparsers):
    p = subparsers.add_parser("serve", help="local web viewer: flame graphs, timeline, requests, heap, compare")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="segment files, directories holding them, or one s3://bucket/prefix")
    p.add_argument("--clickhouse", metavar="URL",
                   help="serve the segments loaded into ClickHouse (flightrec-dump load) instead of PATHs: "
                        "clickhouse://[user[:password]@]host[:port][/database]")
    p.add_argument("--cluster", metavar="NAME", help="with --clickhouse: query the Distributed tables over NAME")
    p.add_argument("--port", type=int, default=8470, metavar="N", help="port to listen on (default 8470; 0: any free)")
    p.add_argument("--bind", default="127.0.0.1", metavar="ADDR",
                   help="address to listen on (default 127.0.0.1: only this machine)")
    p.add_argument("--max-mb", type=float, default=2048, metavar="MB",
                   help="largest selection (segment bytes) a view reads at once (default 2048)")
    p.set_defaults(func=run)


def run(args):
    if not 0 <= args.port <= 65535:
        raise cli.UsageError("--port must be 0..65535")
    if args.max_mb <= 0:
        raise cli.UsageError("--max-mb must be positive")
    # cli.main has checked PATHs against --clickhouse/--cluster (cli._fleet_target, as
    # for every report) and parsed the URL: with it, PATHs hold only its redacted form.
    fleet = cli._fleet
    paths = [] if fleet is not None else args.paths
    return viewer_server.serve(paths, args.bind, args.port, int(args.max_mb * (1 << 20)), fleet=fleet)
