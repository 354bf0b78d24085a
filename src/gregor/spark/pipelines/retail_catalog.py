"""The products of the retail example: the generator sells and ships them, and the retail
pipeline knows each one's starting stock, reorder point and overstock level.

Kept in code rather than in a topic so that the generator and the pipeline agree on it
without a bootstrap step; a real shop would load it from its product database.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Product:
    product_id: str
    name: str
    unit_price: float
    initial_stock: int
    reorder_point: int
    """A reorder is raised when a sale takes the stock below this level."""
    reorder_quantity: int
    """What a reorder asks for, and what a supplier's shipment usually brings."""
    overstock_level: int
    """A shipment that takes the stock above this level triggers a discount."""
    popularity: float
    """Relative share of sales, so that a few products sell much faster than the rest."""


PRODUCTS: tuple[Product, ...] = (
    Product("P001", "espresso beans 1kg", 18.90, 120, 40, 80, 220, 9.0),
    Product("P002", "oat milk 1l", 2.49, 150, 50, 100, 260, 8.0),
    Product("P003", "paper filters (100)", 3.20, 90, 30, 60, 160, 5.0),
    Product("P004", "ceramic mug", 9.50, 60, 20, 40, 110, 3.5),
    Product("P005", "milk frother", 34.00, 40, 12, 24, 70, 2.5),
    Product("P006", "grinder burr set", 59.00, 25, 8, 16, 45, 1.5),
    Product("P007", "descaler", 7.80, 70, 25, 50, 130, 4.0),
    Product("P008", "travel tumbler", 22.00, 45, 15, 30, 85, 2.0),
    Product("P009", "cold brew jug", 27.50, 30, 10, 20, 55, 1.2),
    Product("P010", "gift card", 25.00, 500, 100, 200, 900, 0.8),
)

PRODUCTS_BY_ID: dict[str, Product] = {p.product_id: p for p in PRODUCTS}
