"""Where a broker's event-loop thread spends a measured window, from /proc.

A broker does its work on one thread. Over a window that thread is on a CPU, waiting
for one (runnable, behind other processes on the two cores), asleep in ``epoll_wait``
(nothing to do: waiting for its peers' answers), or blocked in the kernel (``D``: a
``write`` held by the page cache's dirty-page throttle, ``balance_dirty_pages``, or
a read from the disk). Those four tell what bounds a copy: its own CPU, the machine's
other work, its peers, or the disk. The first two come from the thread's
``schedstat`` (nanoseconds on a CPU and in the run queue, counted by the kernel); the
split of the rest comes from sampling its state, its system call and, when blocked,
its ``wchan`` a hundred times a second. The sampler thread costs the bench process a
few percent of a core, which the bench counts as its own.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

# The x86-64 numbers of the system calls a broker's loop waits in.
_WAITS = {232: "epoll_wait", 281: "epoll_pwait", 441: "epoll_pwait2"}


def _schedstat(pid: int) -> tuple[int, int]:
    """Nanoseconds the thread ``pid`` has been on a CPU and waiting in a run queue."""
    on_cpu, waiting, _ = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
    return int(on_cpu), int(waiting)


def _state(pid: int) -> str:
    """``cpu``, ``idle`` (asleep in epoll), ``blocked:<wchan>`` or ``asleep`` now."""
    task = f"/proc/{pid}/task/{pid}"
    stat = Path(f"{task}/stat").read_text()
    state = stat[stat.rindex(")") + 2]
    if state == "R":
        return "cpu"
    if state == "D":
        return f"blocked:{Path(f'{task}/wchan').read_text() or '?'}"
    call = Path(f"{task}/syscall").read_text().split()[0]
    return "idle" if call.isdigit() and int(call) in _WAITS else "asleep"


class ThreadStates:
    """Samples the main thread of each named process until stopped."""

    def __init__(self, pids: dict[str, int], interval: float = 0.01) -> None:
        self.pids, self.interval = pids, interval
        self.samples: dict[str, Counter[str]] = {name: Counter() for name in pids}
        self._started = time.monotonic()
        self._sched = {name: _schedstat(pid) for name, pid in pids.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for name, pid in self.pids.items():
                try:
                    self.samples[name][_state(pid)] += 1
                except (OSError, ValueError, IndexError):
                    continue  # the process ended, or a file read mid-change

    def stop(self) -> dict[str, dict]:
        """Per process: the window's seconds, its seconds on a CPU and waiting for one
        (schedstat), and the share of samples in each state."""
        self._stop.set()
        self._thread.join()
        wall = time.monotonic() - self._started
        result = {}
        for name, pid in self.pids.items():
            try:
                on_cpu, waiting = _schedstat(pid)
            except OSError:
                continue
            counts = self.samples[name]
            total = sum(counts.values()) or 1
            result[name] = {
                "seconds": wall, "on_cpu_s": (on_cpu - self._sched[name][0]) / 1e9,
                "run_queue_s": (waiting - self._sched[name][1]) / 1e9,
                "states": {state: n / total for state, n in counts.most_common()}}
        return result


def summary(name: str, window: dict) -> str:
    """One line: on a CPU, waiting for one, idle, blocked (and where), as shares of the
    window."""
    wall = window["seconds"]
    states = window["states"]
    blocked = {s.split(":", 1)[1]: share for s, share in states.items()
               if s.startswith("blocked:")}
    where = ", ".join(f"{w} {share:.0%}" for w, share in sorted(
        blocked.items(), key=lambda item: -item[1])[:3])
    return (f"{name}'s event-loop thread on a CPU {window['on_cpu_s'] / wall:.0%}, waiting "
            f"for a CPU {window['run_queue_s'] / wall:.0%}, idle in epoll_wait "
            f"{states.get('idle', 0.0):.0%}, blocked in the kernel "
            f"{sum(blocked.values()):.0%}" + (f" ({where})" if where else ""))
