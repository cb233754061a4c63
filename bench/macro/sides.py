"""sides: the configurations every workload runs under, and what each adds
to the measured command (a wrapper command and/or environment variables).
Every side writes whatever it records into the run's output directory, so
its size is the side's trace bytes."""
import os

GPERF_LIB = "/usr/lib/x86_64-linux-gnu/libprofiler.so.0"

# Every flightrec feature off: what is left is the runtime itself (thread
# registry, flush thread, rusage and thread events, segment files).
FEATURES_OFF = {"FLIGHTREC_SAMPLER": "off", "FLIGHTREC_OFFCPU": "0",
                "FLIGHTREC_ALLOC_SAMPLE_BYTES": "0", "FLIGHTREC_SOCKETS": "0"}

# Variables that would leak one side's tool into another side's run.
_STRIP_PREFIXES = ("FLIGHTREC_", "CPUPROFILE", "HEAPTRACK", "DUMP_HEAPTRACK")
_STRIP_NAMES = ("LD_PRELOAD", "LD_LIBRARY_PATH")


def clean_env():
    return {k: v for k, v in os.environ.items()
            if k not in _STRIP_NAMES and not k.startswith(_STRIP_PREFIXES)}


class Side:
    """name: short id used in tables and JSON; label: what it is;
    tool: None, 'flightrec', 'heaptrack' or 'gperftools'; knobs: FLIGHTREC_*."""

    def __init__(self, name, label, tool, knobs=None):
        self.name, self.label, self.tool, self.knobs = name, label, tool, dict(knobs or {})

    def wrap(self, cmd, outdir, lib):
        """cmd under this side, recording into outdir. Variables are set with
        env(1) right before the measured program, so nothing in front of it
        (taskset, time) gets the preload: gperftools' ITIMER_PROF survives
        exec and would kill the next program before its handler exists."""
        if self.tool == "flightrec":
            vars_ = dict(LD_PRELOAD=lib, FLIGHTREC_OUTPUT=outdir, **self.knobs)
        elif self.tool == "heaptrack":
            return ["heaptrack", "-o", os.path.join(outdir, "heaptrack")] + cmd
        elif self.tool == "gperftools":
            vars_ = dict(LD_PRELOAD=GPERF_LIB, CPUPROFILE=os.path.join(outdir, "cpu.prof"),
                         CPUPROFILE_FREQUENCY="99")
        else:
            return cmd
        return ["env"] + ["%s=%s" % kv for kv in vars_.items()] + cmd

    def env_names(self):
        """Variables this side sets (nginx must be told to keep them)."""
        if self.tool == "flightrec":
            return ["LD_PRELOAD", "FLIGHTREC_OUTPUT"] + sorted(self.knobs)
        if self.tool == "gperftools":
            return ["LD_PRELOAD", "CPUPROFILE", "CPUPROFILE_FREQUENCY"]
        if self.tool == "heaptrack":
            return ["LD_PRELOAD", "DUMP_HEAPTRACK_OUTPUT"]
        return []

    def describe(self):
        """The side as a command prefix, for RESULTS.md."""
        if self.tool == "flightrec":
            knobs = "".join(" %s=%s" % kv for kv in sorted(self.knobs.items()))
            return "LD_PRELOAD=build/libflightrec.so FLIGHTREC_OUTPUT=$OUT" + knobs
        if self.tool == "heaptrack":
            return "heaptrack -o $OUT/heaptrack"
        if self.tool == "gperftools":
            return "LD_PRELOAD=%s CPUPROFILE=$OUT/cpu.prof CPUPROFILE_FREQUENCY=99" % GPERF_LIB
        return "(nothing)"

    def to_json(self):
        return {"name": self.name, "label": self.label, "tool": self.tool, "knobs": self.knobs,
                "command": self.describe()}


SIDES = [
    Side("plain", "no tool", None),
    # The same as plain, measured as a side: how far apart two identical
    # configurations land on this machine (the noise floor of every ratio).
    Side("plain-again", "no tool, a second time (A/A: the noise floor)", None),
    Side("fr-default", "flightrec, every default on", "flightrec"),
    Side("fr-core", "flightrec, every feature off (runtime only)", "flightrec", FEATURES_OFF),
    Side("fr-sampler-thread", "flightrec, every default on but the sampler's collection on a thread of its own",
         "flightrec", dict(FLIGHTREC_SAMPLER_THREAD="1")),
    Side("fr-cpu", "flightrec, CPU sampling only", "flightrec",
         dict(FEATURES_OFF, FLIGHTREC_SAMPLER="auto")),
    Side("fr-cpu+offcpu", "flightrec, CPU + off-CPU sampling (off-CPU needs the sampler)", "flightrec",
         dict(FEATURES_OFF, FLIGHTREC_SAMPLER="auto", FLIGHTREC_OFFCPU="1")),
    Side("fr-alloc", "flightrec, allocation sampling only", "flightrec",
         dict(FEATURES_OFF, FLIGHTREC_ALLOC_SAMPLE_BYTES="524288")),
    Side("fr-sockets", "flightrec, socket recording only", "flightrec",
         dict(FEATURES_OFF, FLIGHTREC_SOCKETS="1")),
    Side("heaptrack", "heaptrack (every allocation; its own preload plus an interpreter process)", "heaptrack"),
    Side("gperftools", "gperftools libprofiler.so, CPUPROFILE at 99 Hz", "gperftools"),
]


def by_names(names):
    """The sides named (comma list or list), in SIDES order; plain always included."""
    if isinstance(names, str):
        names = [n for n in names.split(",") if n]
    known = {s.name: s for s in SIDES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit("unknown side(s): %s (known: %s)" % (", ".join(unknown), ", ".join(known)))
    want = set(names) | {"plain"}
    return [s for s in SIDES if s.name in want]
