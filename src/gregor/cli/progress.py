"""Progress lines on stderr for long-running commands.

stdout carries the data (consumed records, perf results) so it can be piped;
progress goes to stderr, and only once a command has run for a whole interval,
so short runs stay quiet.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, interval_s: float, enabled: bool = True,
                 stream: TextIO | None = None) -> None:
        self.interval_s = interval_s
        self.enabled = enabled and interval_s > 0
        self.stream = stream or sys.stderr
        self._next_report = time.monotonic() + interval_s

    def due(self) -> bool:
        return self.enabled and time.monotonic() >= self._next_report

    def report(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
        self._next_report = time.monotonic() + self.interval_s
