"""progress: one self-erasing status line on stderr for long work (reading
many segments, downloading from s3://), shown only when stderr is a terminal.

    p = Progress("reading segments", total=len(paths))
    for path in paths:
        ...
        p.advance(nbytes=size)
    p.done()

When stderr is not a terminal (a pipe, a file, a CI log) nothing at all is
written, so scripts and tests see the same output as before. On a terminal
the line is redrawn at most every REDRAW_S seconds and erased by done().
"""
import os
import sys
import time

REDRAW_S = 0.1


def enabled(stream=None):
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0


class Progress:
    def __init__(self, label, total=None, stream=None):
        self.stream = stream or sys.stderr
        self.on = enabled(self.stream)
        self.label = label
        self.total = total
        self.count = 0
        self.bytes = 0
        self.last_draw = None
        self.drawn = False

    def advance(self, n=1, nbytes=0):
        self.count += n
        self.bytes += nbytes
        self._maybe_draw()

    def add_bytes(self, nbytes):
        """Bytes of the item in progress (a download under way)."""
        self.bytes += nbytes
        self._maybe_draw()

    def _maybe_draw(self):
        if not self.on:
            return
        now = time.monotonic()
        if self.last_draw is not None and now - self.last_draw < REDRAW_S and self.count != self.total:
            return
        self.last_draw = now
        self._draw()

    def _draw(self):
        of = "/%d" % self.total if self.total is not None else ""
        text = "%s: %d%s%s" % (self.label, self.count, of, " (%s)" % _size(self.bytes) if self.bytes else "")
        width = _columns()
        if len(text) > width - 1:
            text = text[:width - 1]
        try:
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()
            self.drawn = True
        except (OSError, ValueError):
            self.on = False  # the terminal went away: the work goes on silently

    def done(self):
        """Erases the line so the report that follows starts clean."""
        if self.on and self.drawn:
            try:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            except (OSError, ValueError):
                pass
        self.drawn = False


def _columns():
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        return 80
