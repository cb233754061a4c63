"""speedscope: writes a speedscope file (https://www.speedscope.app, the
format its file-format-spec.ts defines) from per-thread samples or blocks.

    doc = Document("flightrec cpu profile", spill=tempfile.TemporaryFile("w+"))
    doc.sampled("worker-0 (pid 1, tid 2)", "nanoseconds", [(t, frames, weight), ...])
    doc.evented("main (pid 1, tid 1)", "nanoseconds", [(start, end, frames), ...])
    doc.write(f)

frames are leaf-first frame dicts (as Segment.frames gives them) or the
(label, file, line) triples frame_keys() makes of them; the file lists each
distinct (name, file) once in shared.frames, and stacks refer to them root
first. Times are nanoseconds from the start of the trace, so JavaScript's
doubles hold them exactly. A sampled profile keeps the samples in time order
(speedscope's "Time Order" view); an evented one opens a block's frames at
its start and closes them at its end (blocks of one thread never overlap; a
later one that would is started where the earlier one ended).

Memory: the file lists every sample, so it grows with the trace (the
command holds a thread's samples as columns, or past a bound spills them
to a sorted temporary file: cmd_speedscope.py). Each
profile is written out as JSON text as soon as it is added (to `spill`, a
temporary file, when given), and only the shared frame table and each
distinct stack's text stay in memory; write() puts the frames before the
profiles, where the format wants them. The text is what json.dump of the
whole document (as_dict) writes.
"""
import io
import json
import shutil
import tempfile

from . import profiles

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
_COMPACT = (",", ":")
_CHUNK = 8192  # values per json.dumps call when writing long lists


def frame_keys(frames):
    """The (label, file, line) of each frame: all the file needs of a stack."""
    return tuple((profiles.frame_label(f), f.get("file") or "", f.get("line")) for f in frames)


def _dumps(value):
    return json.dumps(value, separators=_COMPACT)


def evented_end(blocks):
    """endValue of an evented profile of these (start, end, ...) blocks (by
    start): where the last one ends once each starts no earlier than the
    previous one's end."""
    last_end = blocks[0][0]
    for b in blocks:
        last_end = max(b[1], max(b[0], last_end))
    return last_end


def _weights_spill(out):
    """Somewhere for a profile's weights while its samples are written: a
    temporary file when the profiles themselves go to one, else memory."""
    if isinstance(out, io.StringIO):
        return io.StringIO()
    try:
        return tempfile.TemporaryFile("w+", encoding="utf-8", prefix="flightrec-weights-")
    except OSError:
        return io.StringIO()


def _joined(texts):
    """"[" + ",".join(texts) + "]", as a stream of pieces."""
    yield "["
    first = True
    for t in texts:
        yield t if first else "," + t
        first = False
    yield "]"


class Document:
    def __init__(self, name, spill=None):
        self.name = name
        self.frames = []       # shared.frames
        self.frame_ids = {}    # (name, file) -> index
        self.weights = []      # per profile, to pick the one shown first
        self._out = spill if spill is not None else io.StringIO()  # the profiles' JSON text
        self._stacks = {}      # frame keys -> JSON text of the root-first indices

    @property
    def profile_count(self):
        return len(self.weights)

    def _frame(self, key):
        name, file, line = key
        k = (name, file)
        i = self.frame_ids.get(k)
        if i is None:
            i = self.frame_ids[k] = len(self.frames)
            entry = {"name": name}
            if file:
                entry["file"] = file
                if line:
                    entry["line"] = int(line)
            self.frames.append(entry)
        return i

    def stack(self, frames):
        """Root-first frame indices of a leaf-first stack (frame dicts or keys)."""
        keys = frames if isinstance(frames, tuple) else frame_keys(frames)
        return [self._frame(k) for k in reversed(keys)]

    def _stack_text(self, keys):
        text = self._stacks.get(keys)
        if text is None:
            text = self._stacks[keys] = _dumps(self.stack(keys))
        return text

    def _profile(self, head, *bodies):
        """Writes one profile: head's fields, then each (key, JSON text)."""
        self._out.write(("," if self.weights else "") + _dumps(head)[:-1])
        for key, text in bodies:  # text: a string or an iterable of strings
            self._out.write(',"%s":' % key)
            if isinstance(text, str):
                self._out.write(text)
            else:
                self._out.writelines(text)
        self._out.write("}")

    def sampled(self, name, unit, samples):
        """samples: (time, leaf-first frames, weight), any order (sorted here)."""
        samples = sorted(samples, key=lambda s: s[0])
        self.sampled_columns(name, unit, [s[0] for s in samples],
                             [s[1] if isinstance(s[1], tuple) else frame_keys(s[1]) for s in samples],
                             [s[2] for s in samples])

    def sampled_columns(self, name, unit, times, stacks, weights, order=None):
        """The samples as columns (times; frame keys per sample; weights),
        taken in `order` (indices, time order) or as given."""
        if order is None:
            order = range(len(times))
        if not len(order):
            return
        start = times[order[0]]
        last = order[-1]
        end = max(start, times[last] + (weights[last] if unit == "nanoseconds" else 0))
        self.sampled_stream(name, unit, start, end, ((stacks[i], weights[i]) for i in order))

    def sampled_stream(self, name, unit, start, end, samples):
        """samples: (frame keys, weight) in time order, an iterable read once;
        start and end: the profile's startValue and endValue. The weights,
        which the format lists after every sample, wait in a temporary file."""
        with _weights_spill(self._out) as weights:
            total = 0
            pending = []

            def stacks():
                nonlocal total
                for keys, w in samples:
                    total += w
                    pending.append(w)
                    if len(pending) >= _CHUNK:
                        weights.write(("," if weights.tell() else "") + _dumps(pending)[1:-1])
                        pending.clear()
                    yield self._stack_text(keys)

            def weights_text():
                if pending:
                    weights.write(("," if weights.tell() else "") + _dumps(pending)[1:-1])
                weights.seek(0)
                yield "["
                while True:
                    piece = weights.read(1 << 16)
                    if not piece:
                        break
                    yield piece
                yield "]"

            # Frame ids are given in the order the samples list the stacks.
            self._profile({"type": "sampled", "name": name, "unit": unit, "startValue": start, "endValue": end},
                          ("samples", _joined(stacks())), ("weights", weights_text()))
        self.weights.append(total)

    def evented(self, name, unit, blocks):
        """blocks: (start, end, leaf-first frames); one thread's, so they do not nest."""
        blocks = sorted(blocks, key=lambda b: b[0])
        if not blocks:
            return
        self.evented_stream(name, unit, blocks[0][0], evented_end(blocks), iter(blocks))

    def evented_stream(self, name, unit, start, end, blocks):
        """blocks: (start, end, leaf-first frames or frame keys) by start, an
        iterable read once; start and end: the profile's startValue and
        endValue (evented_end of the blocks)."""
        total = [0]

        def events():
            last_end = start
            for b_start, b_end, frames in blocks:
                b_start = max(b_start, last_end)
                b_end = max(b_end, b_start)
                stack = self.stack(frames)
                for f in stack:
                    yield _dumps({"type": "O", "frame": f, "at": b_start})
                for f in reversed(stack):
                    yield _dumps({"type": "C", "frame": f, "at": b_end})
                last_end = b_end
                total[0] += b_end - b_start

        self._profile({"type": "evented", "name": name, "unit": unit, "startValue": start,
                       "endValue": end}, ("events", _joined(events())))
        self.weights.append(total[0])

    def write(self, fp):
        """Writes the whole file (what json.dump(as_dict()) would write)."""
        active = max(range(len(self.weights)), key=self.weights.__getitem__) if self.weights else 0
        fp.write('{"$schema":%s,"name":%s,"exporter":"flightrec-dump","activeProfileIndex":%d,'
                 '"shared":{"frames":%s},"profiles":[' % (_dumps(SCHEMA), _dumps(self.name), active,
                                                          _dumps(self.frames)))
        self._out.seek(0)
        shutil.copyfileobj(self._out, fp)
        fp.write("]}")

    def as_dict(self):
        buf = io.StringIO()
        self.write(buf)
        return json.loads(buf.getvalue())
