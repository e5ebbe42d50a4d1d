"""msrun's console, relayed without MindSpore's INFO chatter.

msrun shows the node's first rank by running `tail -f` on its log, so whatever that rank's
MindSpore runtime logs at INFO level reaches the console too: on CPU two `[INFO] DISTRIBUTED …
Event base dispatch success!` lines at start-up, which no MindSpore log-level variable silences.
The launcher reads msrun's stdout through `ConsoleRelay`, which passes everything on as it comes
(a progress bar's `\\r` updates included, without waiting for a newline) except MindSpore's
INFO/DEBUG log lines, from where one starts to its newline; they stay in the rank's own log
(RUN_DIR/logs/worker_<r>.log).
"""
import os
import re
import select
import sys
import threading
from typing import Optional, TextIO

# MindSpore's C++ log format: `[INFO] DISTRIBUTED(pid,thread,process):time [file:line] …`
_CHATTER = re.compile(rb"\[(?:INFO|DEBUG)\] [A-Z_]+\(\d+,")
_LEVELS = (b"[INFO]", b"[DEBUG]")
_PIECES = re.compile(rb"[^\n]*\n|[^\n]+")
_CHATTER_HEAD = re.compile(rb"[A-Z_]*(\(\d*)?")   # what follows the level while the line still may be chatter


class LineFilter:
    """Bytes in, bytes out: drops chatter (from where it starts, often right after a progress bar's
    text, to the end of its line) and passes the rest on at once. Only a line's tail that could
    still become chatter (`[INF`, `[INFO] DISTRIB`) is held back until it can be told apart."""

    def __init__(self) -> None:
        self._dropping = False    # inside a chatter line, until its newline
        self._held = b""          # the current line's tail that may still become chatter

    def feed(self, data: bytes) -> bytes:
        out = []
        for piece in _PIECES.findall(data):   # lines, and a last piece without its newline yet
            complete = piece.endswith(b"\n")
            if self._dropping:
                self._dropping = not complete
                continue
            text, self._held = self._held + piece, b""
            found = _CHATTER.search(text)
            if found:
                before = text[: found.start()]
                # a line that ran into the chatter ends where the chatter's own line would have
                # (not after a progress bar, which the next `\r` redraws)
                out.append(before + b"\n" if complete and before and b"\r" not in before else before)
                self._dropping = not complete
                continue
            cut = text.rfind(b"[")   # a chatter prefix holds no other `[`: only the last one can start it
            if not complete and cut >= 0 and self._could_be_chatter(text[cut:]):
                text, self._held = text[:cut], text[cut:]
            out.append(text)
        return b"".join(out)

    def flush(self) -> bytes:
        """What is held back when the stream ends (a last line without a newline)."""
        held, self._held = self._held, b""
        return held

    @staticmethod
    def _could_be_chatter(start: bytes) -> bool:
        if not start.startswith(b"["):
            return False
        head = start.split(b" ", 1)
        if len(head) == 1:  # `[INF`, `[INFO]` ...: the level is not complete yet
            return any(tag.startswith(start) for tag in _LEVELS)
        return head[0] in _LEVELS and _CHATTER_HEAD.fullmatch(head[1]) is not None


class ConsoleRelay:
    """A thread copying a pipe to `sink` (sys.stdout) through a LineFilter until the pipe closes or
    stop()."""

    def __init__(self, fd: int, sink: Optional[TextIO] = None) -> None:
        self.fd, self.sink = fd, sink
        self._filter = LineFilter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="msrun-console", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([self.fd], [], [], 0.2)
                if not ready:
                    continue
                data = os.read(self.fd, 65536)
                if not data:
                    break
                self._write(self._filter.feed(data))
            self._write(self._filter.flush())
        finally:
            os.close(self.fd)

    def _write(self, data: bytes) -> None:
        if data:
            sink = self.sink or sys.stdout   # looked up late: tests swap sys.stdout
            try:
                if hasattr(sink, "buffer"):
                    sink.flush()
                    sink.buffer.write(data)
                    sink.buffer.flush()
                else:
                    sink.write(data.decode(errors="replace"))
                    sink.flush()
            except (OSError, ValueError):   # console gone (closed pipe): the ranks keep their logs
                pass

    def stop(self, wait_s: float = 2.0) -> None:
        """Let the relay drain what msrun wrote, then end it (a lingering `tail -f` keeps the pipe
        open after msrun was killed)."""
        self._thread.join(wait_s)
        self._stop.set()
        self._thread.join()
