"""The macro benchmark harness (driven by bench/run_macro.py): real servers
and programs run under each side (plain, flightrec configurations,
heaptrack, gperftools), measured from outside through /proc.

    procs.py         launching, process trees, CPU and memory from /proc
    sides.py         what each side adds to a command (wrapper, environment)
    redis_load.py    redis-server under redis-benchmark
    nginx_load.py    nginx under wrk
    program_load.py  fixed-work C++ programs (CPU-bound, allocation-heavy)
    trace_stats.py   what a side left on disk (bytes, flightrec event counts, drops)
    stats.py         medians of per-round ratios
"""
