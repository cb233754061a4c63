"""flightrec_lib: the decoder behind scripts/flightrec-dump.

Modules:
  segment_file  opening segment files safely (regular files only, bounded size)
  segment   one segment file: framing, schema, intern tables, columnar events
            (format/SPEC.md). Knows no event types: everything comes from the
            segment's SCHEMA.
  trace     many files and directories as one trace: time-merged, resolved
            events (strings as text, stacks as frame dicts), counts, drops,
            threads.
  cli       the command line: plug-in discovery, opening traces, reporting bad
            input (one stderr line per file, never a traceback).
  commands/cmd_*.py  one module per subcommand.

Plug-in contract for subcommands: drop a module `cmd_<name>.py` into commands/ of this
package and define

    def register(subparsers):
        p = subparsers.add_parser("<name>", help="one line")
        cli.add_paths_argument(p)          # PATH... (files and directories)
        p.add_argument(...)
        p.set_defaults(func=run)

    def run(args):
        trace = cli.open_trace(args.paths)  # reports unreadable/corrupt input on stderr
        ...print to stdout...
        return cli.exit_status(trace)       # 1 if any input was bad, else 0

flightrec-dump finds it automatically (no entry-point edit). Raise
cli.UsageError("message") for a bad request: it becomes one stderr line and
exit status 2. A module that fails to import is reported in one stderr line
and the other commands keep working.
"""
