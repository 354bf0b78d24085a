"""One product's stock, kept by the retail pipeline as streaming state.

Whether a sale takes the stock below the reorder point depends on the order of events,
but sales and shipments arrive out of order: late events, two topics read at different
speeds, micro-batches cut anywhere. The ledger therefore holds movements back until the
watermark has passed them and only then applies them, in event-time order (ties broken
by kind and id). Once the watermark has passed a time, Spark drops any event that
arrives with an older one, so the order of what has been applied is final: the ledger
applies the same movements in the same order whether the stream was read in one
micro-batch or a thousand, and whether the query was stopped and restarted in between.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from gregor.pipelines.generators import Product

SALE = "sale"
SHIPMENT = "shipment"


@dataclass(frozen=True, order=True)
class StockMovement:
    """A sale (stock goes down) or shipment (stock goes up); sorts in application order."""

    time_ms: int
    kind: str
    event_id: str
    quantity: int

    @property
    def change(self) -> int:
        return -self.quantity if self.kind == SALE else self.quantity


@dataclass(frozen=True)
class Settled:
    """A movement applied to the stock, the stock after it, and the level it crossed:
    ``reorder`` (a sale took the stock below the reorder point), ``overstock`` (a shipment
    took it above the overstock level) or ``None``."""

    movement: StockMovement
    stock: int
    crossed: str | None


@dataclass
class StockLedger:
    stock: int
    reorder_open: bool = False
    """A reorder was raised and the stock has not climbed back to the reorder point since:
    no second reorder until it has."""
    overstocked: bool = False
    """A discount was raised and the stock has not fallen back to the overstock level."""
    pending: list[StockMovement] = field(default_factory=list)
    """Movements the watermark has not passed yet."""

    @classmethod
    def opening(cls, product: Product) -> StockLedger:
        return cls(stock=product.initial_stock)

    @classmethod
    def from_json(cls, text: str) -> StockLedger:
        data = json.loads(text)
        data["pending"] = [StockMovement(**m) for m in data["pending"]]
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    def receive(self, movements: Iterable[StockMovement], watermark_ms: int) -> None:
        """Hold movements until the watermark passes them. One at or behind the watermark
        is too late to be put in order, and is dropped, as Spark drops late rows."""
        self.pending.extend(m for m in movements if m.time_ms > watermark_ms)

    def settle(self, watermark_ms: int, product: Product) -> list[Settled]:
        """Apply, in order, every held movement the watermark has passed."""
        self.pending.sort()
        due = [m for m in self.pending if m.time_ms <= watermark_ms]
        del self.pending[: len(due)]
        settled = []
        for movement in due:
            self.stock += movement.change
            settled.append(Settled(movement, self.stock, self._crossed(movement, product)))
        return settled

    def next_due_ms(self) -> int | None:
        """The earliest held event time: settle again once the watermark reaches it."""
        return min((m.time_ms for m in self.pending), default=None)

    def _crossed(self, movement: StockMovement, product: Product) -> str | None:
        """Raise each alert once per crossing: re-armed only when the stock is back on the
        right side of its level, so a product that stays low is not reordered again."""
        crossed = None
        if self.stock >= product.reorder_point:
            self.reorder_open = False
        elif movement.kind == SALE and not self.reorder_open:
            self.reorder_open = True
            crossed = "reorder"
        if self.stock <= product.overstock_level:
            self.overstocked = False
        elif movement.kind == SHIPMENT and not self.overstocked:
            self.overstocked = True
            crossed = "overstock"
        return crossed
