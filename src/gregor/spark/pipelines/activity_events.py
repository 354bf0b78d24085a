"""Visitors of an online shop, for the activity pipeline: page views, clicks and searches.

About a dozen visitors are on the site at any time; each visit is a short walk through
the shop (landing page, product and category pages, searches, the cart, sometimes the
checkout) with a click or two on each page, after which the visitor leaves.  A visitor
may come back later, which is a new session only if the pause was long enough.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count

from gregor.spark.pipelines.event_publisher import GeneratedEvent, lateness_ms
from gregor.spark.pipelines.event_time import iso_utc
from gregor.spark.pipelines.retail_catalog import PRODUCTS
from gregor.spark.pipelines.retail_events import event_ids

ACTIVITY_TOPIC = "activity"
USERS = 500
CONCURRENT_VISITS = 12
VISIT_LENGTH = (3, 25)
CATEGORIES = ("coffee", "milk", "brewing", "cups", "gifts")
SEARCHES = ("decaf", "oat milk", "grinder", "filter papers", "mug", "gift card", "cold brew")
CLICK_TARGETS = ("add-to-cart", "product-tile", "banner", "filter", "recommendation")
ACTIONS = (("page_view", 50), ("click", 32), ("search", 18))
DEVICES = (("mobile", 60), ("desktop", 35), ("tablet", 5))


@dataclass
class _Visit:
    user_id: str
    device: str
    page: str
    events_left: int


def activity_events(seed: int, start_ms: int, rate: float) -> Iterator[GeneratedEvent]:
    """An endless stream of site events, ``rate`` per second of event time."""
    rng = random.Random(seed)
    stem = event_ids(seed, start_ms)
    visits: list[_Visit] = []
    actions, action_weights = zip(*ACTIONS, strict=True)
    devices, device_weights = zip(*DEVICES, strict=True)
    for tick in count():
        send_ms = start_ms + round(tick * 1000 / rate)
        timestamp_ms = send_ms - lateness_ms(rng)
        if len(visits) < CONCURRENT_VISITS:
            busy = {v.user_id for v in visits}
            user_id = f"u{rng.randrange(USERS):04d}"
            if user_id in busy:
                continue
            visit = _Visit(
                user_id, rng.choices(devices, device_weights)[0], "", rng.randint(*VISIT_LENGTH)
            )
            visits.append(visit)
            action = "page_view"
        else:
            visit = rng.choice(visits)
            action = rng.choices(actions, action_weights)[0]
        event = {
            "event_id": f"act-{stem}-{tick}",
            "user_id": visit.user_id,
            "type": action,
            "device": visit.device,
            "event_time": iso_utc(timestamp_ms),
        }
        if action == "page_view":
            event["referrer"] = visit.page or None
            visit.page = _next_page(rng, visit.page)
        elif action == "click":
            event["element"] = rng.choice(CLICK_TARGETS)
        else:
            event["query"] = rng.choice(SEARCHES)
            visit.page = "/search"
        event["page"] = visit.page
        visit.events_left -= 1
        if visit.events_left == 0:
            visits.remove(visit)
        yield GeneratedEvent(ACTIVITY_TOPIC, visit.user_id, event, timestamp_ms, send_ms)


def _next_page(rng: random.Random, current: str) -> str:
    if not current:
        return rng.choice(("/", "/", f"/category/{rng.choice(CATEGORIES)}", "/search"))
    if current == "/cart" and rng.random() < 0.4:
        return "/checkout"
    roll = rng.random()
    if roll < 0.55:
        return f"/products/{rng.choice(PRODUCTS).product_id}"
    if roll < 0.8:
        return f"/category/{rng.choice(CATEGORIES)}"
    if roll < 0.92:
        return "/cart"
    return "/"
