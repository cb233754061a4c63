"""speedscope: builds a speedscope file (https://www.speedscope.app, the
format its file-format-spec.ts defines) from per-thread samples or blocks.

    doc = Document("flightrec cpu profile")
    doc.sampled("worker-0 (pid 1, tid 2)", "nanoseconds", [(t, frames, weight), ...])
    doc.evented("main (pid 1, tid 1)", "nanoseconds", [(start, end, frames), ...])
    json.dump(doc.as_dict(), f)

frames are leaf-first frame dicts (as Segment.frames gives them); the file
lists each distinct (name, file) once in shared.frames, and stacks refer to
them root first. Times are nanoseconds from the start of the trace, so
JavaScript's doubles hold them exactly. A sampled profile keeps the samples
in time order (speedscope's "Time Order" view); an evented one opens a
block's frames at its start and closes them at its end (blocks of one
thread never overlap; a later one that would is started where the earlier
one ended).
"""
from . import profiles

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


class Document:
    def __init__(self, name):
        self.name = name
        self.frames = []       # shared.frames
        self.frame_ids = {}    # (name, file) -> index
        self.profiles = []
        self.weights = []      # per profile, to pick the one shown first

    def _frame(self, frame):
        name = profiles.frame_label(frame)
        file = frame.get("file") or ""
        key = (name, file)
        i = self.frame_ids.get(key)
        if i is None:
            i = self.frame_ids[key] = len(self.frames)
            entry = {"name": name}
            if file:
                entry["file"] = file
                if frame.get("line"):
                    entry["line"] = int(frame["line"])
            self.frames.append(entry)
        return i

    def stack(self, frames):
        """Root-first frame indices of a leaf-first stack."""
        return [self._frame(f) for f in reversed(frames)]

    def sampled(self, name, unit, samples):
        """samples: (time, leaf-first frames, weight), any order (sorted here)."""
        samples = sorted(samples, key=lambda s: s[0])
        if not samples:
            return
        stacks = [self.stack(f) for _, f, _ in samples]
        weights = [w for _, _, w in samples]
        start = samples[0][0]
        end = max(start, samples[-1][0] + (samples[-1][2] if unit == "nanoseconds" else 0))
        self.profiles.append({"type": "sampled", "name": name, "unit": unit, "startValue": start,
                              "endValue": end, "samples": stacks, "weights": weights})
        self.weights.append(sum(weights))

    def evented(self, name, unit, blocks):
        """blocks: (start, end, leaf-first frames); one thread's, so they do not nest."""
        blocks = sorted(blocks, key=lambda b: b[0])
        if not blocks:
            return
        events = []
        last_end = blocks[0][0]
        total = 0
        for start, end, frames in blocks:
            start = max(start, last_end)
            end = max(end, start)
            stack = self.stack(frames)
            events.extend({"type": "O", "frame": f, "at": start} for f in stack)
            events.extend({"type": "C", "frame": f, "at": end} for f in reversed(stack))
            last_end = end
            total += end - start
        self.profiles.append({"type": "evented", "name": name, "unit": unit, "startValue": blocks[0][0],
                              "endValue": last_end, "events": events})
        self.weights.append(total)

    def as_dict(self):
        active = max(range(len(self.weights)), key=self.weights.__getitem__) if self.weights else 0
        return {"$schema": SCHEMA, "name": self.name, "exporter": "flightrec-dump",
                "activeProfileIndex": active, "shared": {"frames": self.frames}, "profiles": self.profiles}
