"""How a broker process stops: within a bound on SIGTERM or SIGINT, at once on a second.

Kafka bounds its controlled shutdown (``controlled.shutdown.max.retries`` attempts,
``controlled.shutdown.retry.backoff.ms`` apart, each waiting for the controller at most
a request timeout) and then stops anyway, flushing and closing its logs. gregor's
controlled shutdown has the same bound (:func:`controlled_shutdown_bound_s`) and every
later step is local or bounded too. Still, what no timeout reaches can hold a process:
a kazoo thread that does not end, a disk that does not answer, a start-up that the
signal interrupted. So the first signal also arms a watchdog that ends the process at
:func:`shutdown_bound_s` however far the clean shutdown got (the logs are then
recovered at the next start, as after a crash). A second signal ends it at once,
for whoever will not wait.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from types import FrameType

from gregor.config import BrokerConfig

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)
CLOSE_BOUND_S = 30.0
"""What a broker is given after its controlled shutdown to close: connections, the
replica fetchers, ZooKeeper (each bounded on its own, well within it) and the logs'
flush and close, which at a thousand partitions takes a few seconds on a busy disk."""
OVERDUE_EXIT_STATUS = 1


def controlled_shutdown_bound_s(config: BrokerConfig) -> float:
    """The longest a controlled shutdown takes: every attempt waiting its full
    ``request.timeout.ms``, with the backoff between attempts."""
    attempts = config["controlled.shutdown.max.retries"]
    if not config["controlled.shutdown.enable"] or attempts == 0:
        return 0.0
    return (attempts * config["request.timeout.ms"]
            + (attempts - 1) * config["controlled.shutdown.retry.backoff.ms"]) / 1000


def shutdown_bound_s(config: BrokerConfig) -> float:
    """How long after SIGTERM a broker process may still run, whatever ZooKeeper, the
    controller or the other brokers do."""
    return controlled_shutdown_bound_s(config) + CLOSE_BOUND_S


class StopSignals:
    """Sets ``stop`` on the first SIGTERM or SIGINT and arms the watchdog; exits the
    process on the next one.

    The second signal is handled by a plain ``signal.signal`` handler rather than on
    the event loop: it runs even while the loop is busy (a thousand logs being
    flushed), which is when someone sends it."""

    def __init__(self, stop: asyncio.Event, bound_s: float) -> None:
        self.stop = stop
        self.bound_s = bound_s
        self._loop = asyncio.get_running_loop()
        self._signals: list[signal.Signals] = []

    def install(self) -> None:
        """Handle both signals, but one the process was started ignoring: a background
        job of a script ignores SIGINT (bash does that), and its script stops it with
        SIGTERM on Ctrl-C, which the terminal also sends to the job as SIGINT; counted
        as a second signal, that would skip the clean shutdown."""
        self._signals = [sig for sig in SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]
        for sig in self._signals:
            self._loop.add_signal_handler(sig, self._first, sig)

    def _first(self, signum: int) -> None:
        log.info("%s: stopping within %.0f s (send it again to exit at once)",
                 signal.Signals(signum).name, self.bound_s)
        self.stop.set()
        for sig in self._signals:
            self._loop.remove_signal_handler(sig)
            signal.signal(sig, _exit_now)
        watchdog = threading.Timer(self.bound_s, _overdue, (self.bound_s,))
        watchdog.daemon = True
        watchdog.start()


def _exit_now(signum: int, frame: FrameType | None) -> None:
    log.warning("%s again: exiting at once, without a clean shutdown",
                signal.Signals(signum).name)
    os._exit(128 + signum)


def _overdue(bound_s: float) -> None:
    log.error("still running %.0f s after the signal to stop: exiting now (whatever was "
              "not closed cleanly is recovered at the next start)", bound_s)
    os._exit(OVERDUE_EXIT_STATUS)
