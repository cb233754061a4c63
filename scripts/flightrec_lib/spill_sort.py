"""spill_sort: sorting more items than memory should hold.

Items are tuples of KEYS integers followed by one string that holds no
newline (JSON text, numbers: never text taken from a trace as it is). Items are kept in a run of at most RUN_ITEMS;
a full run is sorted and written to an anonymous temporary file, and the
runs are merged when the items are read back, so memory holds one run
whatever the number of items (docs/LIMITS.md). Used by `chrome` (its
timeline lists every event) and `requests --json` (every request).

If no temporary file can be made, runs stay in memory: the old way, with a
larger footprint but the same output.
"""
import heapq
import tempfile

# Items held in memory before a sorted run goes to a temporary file, and
# run files merged into one before they would hold too many descriptors.
RUN_ITEMS = 100_000
MERGE_FAN_IN = 64


class SpillSort:
    def __init__(self, keys, spill_dir=None, prefix="flightrec-sort-"):
        self._keys = keys
        self._line = " ".join(["%d"] * keys + ["%s\n"])
        self._run = []
        self._files = []
        self._spill_dir = spill_dir
        self._prefix = prefix
        self._spill_at = RUN_ITEMS
        self.count = 0

    def add(self, item):
        self._run.append(item)
        self.count += 1
        if len(self._run) >= self._spill_at:
            self._spill()

    def _temp(self):
        try:
            return tempfile.TemporaryFile("w+", encoding="utf-8", dir=self._spill_dir, prefix="." + self._prefix)
        except OSError:
            return tempfile.TemporaryFile("w+", encoding="utf-8", prefix=self._prefix)

    def _read(self, f):
        f.seek(0)
        keys = self._keys
        for line in f:
            parts = line.split(" ", keys)
            yield tuple(map(int, parts[:keys])) + (parts[keys][:-1],)

    def _spill(self):
        self._run.sort()
        try:
            f = self._temp()
        except OSError:
            self._spill_at = len(self._run) + RUN_ITEMS  # nowhere to spill: held
            return
        line = self._line
        f.writelines(line % item for item in self._run)
        self._run = []
        self._files.append(f)
        if len(self._files) >= MERGE_FAN_IN:
            try:
                merged = self._temp()
            except OSError:
                return  # merged at the end instead
            merged.writelines(line % item for item in heapq.merge(*map(self._read, self._files)))
            self.close()
            self._files = [merged]

    def sorted(self):
        """Every item added, in order (a generator: the run files are read as it goes)."""
        self._run.sort()
        if not self._files:
            return iter(self._run)
        return heapq.merge(*map(self._read, self._files), self._run)

    def close(self):
        for f in self._files:
            f.close()
        self._files = []
