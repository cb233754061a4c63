"""flightrec-dump's subcommands, one module each (cmd_<name>.py); cli.py
discovers them here. See the package's __init__ for the plug-in contract."""
