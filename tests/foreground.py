"""What a terminal gives the command it runs in the foreground."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """For ``preexec_fn``: SIGINT at its default, as a terminal's foreground job has it,
    even when pytest itself was started with it ignored (``&`` in a script), which the
    child would inherit and keep: its Ctrl-C test would then wait for nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
