"""The monitoring pipeline's verdict on one (topic, window): records counted in the topic
against records producers reported sending into it.

Two deadlines, both in event time and measured from the end of the window:

* ``lag_after_ms``: records still missing then are *lagging*: reported as sent, not
  (yet) in the topic;
* ``loss_after_ms`` (the watermark delay): the window is final, since Spark drops
  anything older from now on; records still missing are *lost*, and more records than
  reported are *excess* (duplicates from producer retries, or a producer that did not
  report).

A window that is still short at its final check is reported as lagging first (if its
lag check has not reported it already) and then as lost, so the alerts for a window do
not depend on how the input happened to be cut into micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass

LAG = "lag"
LOSS = "loss"
EXCESS = "excess"


@dataclass
class WindowAudit:
    observed: int = 0
    reported: int = 0
    lag_checked: bool = False


@dataclass(frozen=True)
class Deadlines:
    lag_after_ms: int
    loss_after_ms: int

    def __post_init__(self) -> None:
        if not 0 <= self.lag_after_ms < self.loss_after_ms:
            raise ValueError("the lag deadline must come before the loss deadline")

    def lag_check_watermark(self, window_end_ms: int) -> int:
        """The watermark at which the lag check is due: the watermark trails the newest
        event time by ``loss_after_ms``."""
        return window_end_ms + self.lag_after_ms - self.loss_after_ms


def review(
    audit: WindowAudit, window_end_ms: int, watermark_ms: int, deadlines: Deadlines
) -> tuple[list[str], bool]:
    """The alert kinds due at this watermark, and whether the window is final."""
    final = watermark_ms >= window_end_ms
    alerts = []
    missing = audit.reported > audit.observed
    if not audit.lag_checked and (
        final or watermark_ms >= deadlines.lag_check_watermark(window_end_ms)
    ):
        audit.lag_checked = True
        if missing:
            alerts.append(LAG)
    if final:
        if missing:
            alerts.append(LOSS)
        elif audit.observed > audit.reported > 0:
            alerts.append(EXCESS)
    return alerts, final


def next_check_ms(audit: WindowAudit, window_end_ms: int, deadlines: Deadlines) -> int:
    """The watermark at which :func:`review` has something new to say."""
    if audit.lag_checked:
        return window_end_ms
    return deadlines.lag_check_watermark(window_end_ms)
