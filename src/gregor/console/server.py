"""The console's HTTP side: a JSON API over ``ClusterAdmin`` and the built front end.

Kafka calls block (librdkafka), so each runs on a worker thread and the event loop
stays free for other pages and live tails. Every failure reaches the browser as
``{"error": "<words>"}``: 400 for input refused before asking Kafka, 404 for a topic
or group that does not exist, 502 for what the cluster refused or could not answer.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_type_hints

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gregor.cli.errors import CliError
from gregor.cli.groups_cmd import ResetTo
from gregor.console.admin import SIZE_UNAVAILABLE, ClusterAdmin, NotFound, RequestError
from gregor.console.history import History
from gregor.console.messages import Filters, Follower, Start, ValueDecoder, browse
from gregor.console.metrics import SIZE_COUNTED

if TYPE_CHECKING:  # the schemas extra is needed only with --schema-registry
    from gregor.console.schemas import RegistryView

WEB_DIST = Path(__file__).parent / "web" / "dist"
_KEEPALIVE_S = 15.0
_FOLLOW_POLL_S = 0.5
# Kafka calls wait on threads; a broker that is down holds each up to CALL_TIMEOUT_S,
# so allow enough of them that other pages still answer meanwhile.
_THREADS = anyio.CapacityLimiter(64)
_RESET_KINDS = get_args(get_type_hints(ResetTo)["kind"])
T = TypeVar("T")


async def _run(function: Callable[..., T], *args: Any) -> T:
    return await anyio.to_thread.run_sync(function, *args, limiter=_THREADS)


def create_app(admin: ClusterAdmin, history: History,
               allowed_hosts: Sequence[str] = ("*",),
               registry: RegistryView | None = None) -> Starlette:
    """The ASGI app; it starts the history sampler with the server and stops it after.

    The console has no login: whoever reaches it may delete topics. ``allowed_hosts``
    (the Host header's names) keeps web pages elsewhere out of a console on this
    machine by DNS rebinding, and bodies must be JSON, which a page elsewhere can only
    send after a CORS preflight the console never grants.
    """

    values = None if registry is None else registry.decoded

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        history.start()
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(history.stop)

    async def info(_: Request) -> Response:
        return JSONResponse({"bootstrap": admin.bootstrap, "refresh_s": history.interval_s,
                             "schema_registry": None if registry is None else registry.url})

    def _registry() -> RegistryView:
        if registry is None:
            raise NotFound("no schema registry: start gregor console with "
                           "--schema-registry URL")
        return registry

    async def subjects(_: Request) -> Response:
        return JSONResponse({"subjects": await _run(_registry().subjects)})

    async def subject(request: Request) -> Response:
        return JSONResponse(await _run(_registry().subject, request.path_params["subject"]))

    async def subject_diff(request: Request) -> Response:
        old = _query_int(request.query_params, "from")
        new = _query_int(request.query_params, "to")
        if old is None or new is None:
            raise RequestError("from and to are version numbers")
        return JSONResponse({"diff": await _run(_registry().diff,
                                                request.path_params["subject"], old, new)})

    async def cluster(_: Request) -> Response:
        view = await _run(admin.cluster)
        view["throughput"] = history.cluster_throughput()
        return JSONResponse(view)

    async def topics(_: Request) -> Response:
        rows = await _run(admin.topics)
        rates = history.topic_rates()
        sizes: dict[str, float] = {}
        logs = history.metrics.sizes() if history.metrics else {}
        for (topic, _partition), size in logs.items():
            sizes[topic] = sizes.get(topic, 0.0) + size
        for row in rows:
            row["rate"] = rates.get(row["name"])
            row["size"] = sizes.get(row["name"])
        return JSONResponse({"topics": rows, **_size_note(history)})

    async def create_topic(request: Request) -> Response:
        body = await _body(request)
        name = _text(body, "name")
        if not name:
            raise RequestError("a topic needs a name")
        configs = body.get("configs") or {}
        if not isinstance(configs, dict):
            raise RequestError("configs must map names to values")
        await _run(admin.create_topic, name, _int(body, "partitions", -1),
                   _int(body, "replication_factor", -1),
                   {str(k): str(v) for k, v in configs.items()})
        return JSONResponse({"created": name}, status_code=201)

    async def topic(request: Request) -> Response:
        name = request.path_params["name"]
        view = await _run(admin.topic, name)
        view["rate"] = history.messages_in(name)
        view.update(history.broker_throughput(name))
        sizes = history.metrics.sizes() if history.metrics else {}
        for row in view["partitions"]:
            row["size"] = sizes.get((name, row["partition"]))
        view.update(_size_note(history))
        return JSONResponse(view)

    async def delete_topic(request: Request) -> Response:
        await _run(admin.delete_topic, request.path_params["name"])
        return JSONResponse({"deleted": request.path_params["name"]})

    async def add_partitions(request: Request) -> Response:
        body = await _body(request)
        await _run(admin.add_partitions, request.path_params["name"], _int(body, "count"))
        return JSONResponse({"partitions": body["count"]})

    async def alter_configs(request: Request) -> Response:
        body = await _body(request)
        set_configs = body.get("set") or {}
        delete_configs = body.get("delete") or []
        if not isinstance(set_configs, dict) or not isinstance(delete_configs, list):
            raise RequestError("expected {set: {name: value}, delete: [name]}")
        await _run(admin.alter_configs, request.path_params["name"],
                   {str(k): str(v) for k, v in set_configs.items()},
                   [str(k) for k in delete_configs])
        return JSONResponse({"altered": request.path_params["name"]})

    async def messages(request: Request) -> Response:
        query = request.query_params
        start = query.get("start", "end")
        if start not in get_args(Start):
            raise RequestError(f"start must be one of {', '.join(get_args(Start))}")
        at: int | dict[int, int] = _query_int(query, "at") or 0
        if query.get("resume"):  # "Load more": each partition goes on where it stopped
            start, at = "offset", _resume(query["resume"])
        found = await _run(browse, admin, request.path_params["name"],
                           _query_int(query, "partition"), start, at,
                           _query_int(query, "limit") or 100, _filters(query), values)
        return JSONResponse(found)

    async def produce(request: Request) -> Response:
        body = await _body(request)
        headers = body.get("headers") or []
        if not isinstance(headers, list) or not all(
                isinstance(h, list) and len(h) == 2 for h in headers):
            raise RequestError("headers must be a list of [name, value] pairs")
        partition = body.get("partition")
        if partition is not None and not isinstance(partition, int):
            raise RequestError("partition must be a number")
        key, value = body.get("key"), body.get("value")
        delivered = await _run(
            admin.produce, request.path_params["name"], partition,
            None if key is None else str(key).encode(),
            None if value is None else str(value).encode(),
            [(str(name), str(data).encode()) for name, data in headers])
        return JSONResponse(delivered, status_code=201)

    async def follow(request: Request) -> Response:
        name = request.path_params["name"]
        partition = _query_int(request.query_params, "partition")
        filters = _filters(request.query_params)
        return StreamingResponse(_follow(admin, name, partition, filters, values),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def groups(_: Request) -> Response:
        return JSONResponse({"groups": await _run(admin.groups)})

    async def group(request: Request) -> Response:
        group_id = _group_id(request)
        view = await _run(admin.group, group_id)
        view["history"] = history.group_lag(group_id)
        return JSONResponse(view)

    async def delete_group(request: Request) -> Response:
        group_id = _group_id(request)
        await _run(admin.delete_group, group_id)
        return JSONResponse({"deleted": group_id})

    async def reset_offsets(request: Request) -> Response:
        body = await _body(request)
        topics = body.get("topics")
        if not isinstance(topics, list) or not topics:
            raise RequestError("choose at least one topic")
        kind: Any = body.get("to")  # one of ResetTo's kinds, checked here
        if kind not in _RESET_KINDS:
            raise RequestError("to must be earliest, latest, timestamp, offset or shift")
        to = ResetTo(kind, _int(body, "value", 0))
        rows = await _run(admin.reset_offsets, _group_id(request), [str(t) for t in topics],
                          to, bool(body.get("execute")))
        return JSONResponse({"offsets": rows, "executed": bool(body.get("execute"))})

    async def index(_: Request) -> Response:
        page = WEB_DIST / "index.html"
        if not page.exists():
            return PlainTextResponse(
                "The console's front end is not built: run scripts/build-console.sh.",
                status_code=503)
        return FileResponse(page, headers={"Cache-Control": "no-cache"})

    routes = [
        Route("/", index),
        Route("/api/info", info),
        Route("/api/cluster", cluster),
        Route("/api/topics", topics),
        Route("/api/topics", create_topic, methods=["POST"]),
        Route("/api/topics/{name}", topic),
        Route("/api/topics/{name}", delete_topic, methods=["DELETE"]),
        Route("/api/topics/{name}/partitions", add_partitions, methods=["POST"]),
        Route("/api/topics/{name}/configs", alter_configs, methods=["PATCH"]),
        Route("/api/topics/{name}/messages", messages),
        Route("/api/topics/{name}/messages", produce, methods=["POST"]),
        Route("/api/topics/{name}/follow", follow),
        # Group ids may hold any character, '/' included: they travel in the query.
        Route("/api/subjects", subjects),
        Route("/api/subjects/{subject}", subject),
        Route("/api/subjects/{subject}/diff", subject_diff),
        Route("/api/groups", groups),
        Route("/api/group", group),
        Route("/api/group", delete_group, methods=["DELETE"]),
        Route("/api/group/reset", reset_offsets, methods=["POST"]),
        Mount("/assets", StaticFiles(directory=WEB_DIST, check_dir=False)),
    ]
    handlers: dict[Any, Callable] = {
        RequestError: lambda _, exc: _error(exc, 400),
        NotFound: lambda _, exc: _error(exc, 404),
        CliError: lambda _, exc: _error(exc, 502),
    }
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers,
                     middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts,
                                            www_redirect=False),
                                 Middleware(GZipMiddleware, minimum_size=1024)])


async def _follow(admin: ClusterAdmin, topic: str, partition: int | None,
                  filters: Filters, values: ValueDecoder | None) -> AsyncIterator[str]:
    """Server-sent events: ``ready`` (with the start offsets), then ``message`` per
    record, ``outage`` when no broker answers and ``resumed`` when one does again,
    ``failure`` when the tail cannot go on."""
    try:
        follower = await _run(Follower, admin, topic, partition, filters, values)
    except CliError as exc:
        yield _event("failure", {"error": str(exc)})
        return
    try:
        yield _event("ready", {"offsets": {str(p): o for p, o in follower.start.items()}})
        last_sent = time.monotonic()
        while True:
            try:
                found = await _run(follower.poll, _FOLLOW_POLL_S)
            except CliError as exc:
                yield _event("failure", {"error": str(exc)})
                return
            for message in found:
                yield _event("message", message)
            outage = follower.outage()
            if outage:
                yield _event("outage", {"error": outage})
            resumed = follower.down and not outage and await _run(follower.recovered)
            if resumed:
                yield _event("resumed", {})
            if found or outage or resumed:
                last_sent = time.monotonic()
            elif time.monotonic() - last_sent > _KEEPALIVE_S:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
    finally:
        # Cancelled when the browser goes away; a poll may still hold the consumer, and
        # close waits for it, so close off the event loop.
        threading.Thread(target=follower.close, name="console-follow-close").start()


def _size_note(history: History) -> dict[str, Any]:
    """What the sizes shown are, or why there are none."""
    if history.metrics is None:
        return {"size_note": SIZE_UNAVAILABLE}
    return {"size_note": f"{SIZE_COUNTED}, as the latest scrape found them.",
            "metrics": history.metrics.status()}


def _event(kind: str, data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n"


def _error(exc: Exception, status: int) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=status)


async def _body(request: Request) -> dict[str, Any]:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise RequestError("the request body must be JSON (Content-Type: application/json)")
    try:
        body = await request.json()
    except ValueError:
        raise RequestError("the request body must be JSON") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    return value.strip() if isinstance(value, str) else ""


def _int(body: dict[str, Any], name: str, default: int | None = None) -> int:
    value = body.get(name, default)
    if value is None and default is not None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestError(f"{name.replace('_', ' ')} must be a whole number")
    return value


def _query_int(query: Any, name: str) -> int | None:
    raw = query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise RequestError(f"{name} must be a whole number, got {raw!r}") from None


def _resume(text: str) -> dict[int, int]:
    """``P:OFFSET,P:OFFSET`` (a browse's ``next``) as a partition -> offset map."""
    try:
        return {int(p): int(o) for p, _, o in (pair.partition(":") for pair in text.split(","))}
    except ValueError:
        raise RequestError(f"resume expects P:OFFSET,..., got {text!r}") from None


def _filters(query: Any) -> Filters:
    return Filters(key=query.get("key", ""), value=query.get("value", ""),
                   header=query.get("header", ""))


def _group_id(request: Request) -> str:
    group_id = request.query_params.get("id")
    if not group_id:
        raise RequestError("which group? (?id=...)")
    return group_id
