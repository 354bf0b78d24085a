"""Per-product stock, kept by the retail pipeline as streaming state.

Sales and shipments arrive out of order (late events, two topics read at different
speeds, micro-batches cut anywhere), but whether a sale takes the stock below the
reorder point depends on the order of events.  The ledger therefore holds events back
until the watermark has passed them, and only then applies them in event-time order
(ties broken by kind and id): once the watermark passes an event time, Spark drops any
later-arriving event that is older, so the order of everything applied is final.  The
outcome is the same whether the stream was read in one micro-batch or a thousand, and
whether the query was stopped and restarted in between.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from gregor.spark.pipelines.retail_catalog import Product

SALE = "sale"
SHIPMENT = "shipment"


@dataclass(frozen=True, order=True)
class StockMovement:
    """A sale (stock goes down) or shipment (stock goes up); sorts in application order."""

    time_ms: int
    kind: str
    event_id: str
    quantity: int


@dataclass(frozen=True)
class StockAlert:
    """The stock crossed a level: below the reorder point after a sale (``reorder``) or
    above the overstock level after a shipment (``overstock``)."""

    kind: str
    movement: StockMovement
    stock: int


@dataclass
class StockLedger:
    stock: int
    reorder_open: bool = False
    """A reorder was raised and stock has not yet climbed back to the reorder point; no
    second reorder until it has."""
    overstocked: bool = False
    """A discount was raised and stock has not yet fallen back to the overstock level."""
    pending: list[StockMovement] = field(default_factory=list)
    """Movements the watermark has not passed yet."""

    @classmethod
    def opening(cls, product: Product) -> StockLedger:
        return cls(stock=product.initial_stock)

    @classmethod
    def from_json(cls, text: str) -> StockLedger:
        data = json.loads(text)
        data["pending"] = [StockMovement(*m) for m in data["pending"]]
        return cls(**data)

    def to_json(self) -> str:
        pending = [[m.time_ms, m.kind, m.event_id, m.quantity] for m in self.pending]
        return json.dumps({**self.__dict__, "pending": pending}, separators=(",", ":"))

    def receive(self, movements: Iterable[StockMovement], watermark_ms: int) -> None:
        """Hold movements back until the watermark passes them.  A movement already at or
        behind the watermark is late, and dropped as Spark drops late rows."""
        self.pending.extend(m for m in movements if m.time_ms > watermark_ms)

    def settle(self, watermark_ms: int, product: Product) -> list[StockAlert]:
        """Apply, in order, every held movement the watermark has passed."""
        self.pending.sort()
        due = [m for m in self.pending if m.time_ms <= watermark_ms]
        self.pending = self.pending[len(due) :]
        alerts: list[StockAlert] = []
        for movement in due:
            if movement.kind == SALE:
                self.stock -= movement.quantity
            else:
                self.stock += movement.quantity
            alerts.extend(self._crossings(movement, product))
        return alerts

    def next_due_ms(self) -> int | None:
        """The earliest held event time: settle again once the watermark reaches it."""
        return min((m.time_ms for m in self.pending), default=None)

    def _crossings(self, movement: StockMovement, product: Product) -> list[StockAlert]:
        alerts = []
        if self.stock < product.reorder_point:
            if movement.kind == SALE and not self.reorder_open:
                self.reorder_open = True
                alerts.append(StockAlert("reorder", movement, self.stock))
        else:
            self.reorder_open = False
        if self.stock > product.overstock_level:
            if movement.kind == SHIPMENT and not self.overstocked:
                self.overstocked = True
                alerts.append(StockAlert("overstock", movement, self.stock))
        else:
            self.overstocked = False
        return alerts
