"""Confluent's REST API over the registry, as an ASGI app (starlette).

Answers carry Confluent's media type and field names; errors are
``{"error_code": ..., "message": ...}`` with Confluent's statuses. Handlers are plain
functions, which starlette runs in its thread pool: a write waits for the topic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gregor.schemas import errors
from gregor.schemas.registry import SchemaRegistry, SchemaRequest
from gregor.schemas.schema_types import SCHEMA_TYPES, Reference
from gregor.schemas.serving import DirectAnswer, KeptAnswer
from gregor.schemas.state import StoredSchema, SubjectVersion

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"

Forward = Callable[[Request, bytes], Awaitable[Response | None]]
"""None at the primary; elsewhere sends the write to the primary and gives its answer."""
Handler = Callable[[Request, bytes], Any]


def _answer(body: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE)


def _result(result: Any) -> Response:
    return result if isinstance(result, Response) else _answer(result)


def _error(error: errors.RegistryError) -> Response:
    return _answer({"error_code": error.code, "message": error.message}, error.status)


def _flag(request: Request, name: str) -> bool:
    """A boolean query parameter as clients spell it (confluent-kafka sends ``True``)."""
    return request.query_params.get(name, "false").lower() == "true"


def _page(request: Request, items: list[Any]) -> list[Any]:
    """``offset`` and ``limit`` (-1: all), as confluent-kafka's client sends them."""
    try:
        offset = max(0, int(request.query_params.get("offset", "0")))
        limit = int(request.query_params.get("limit", "-1"))
    except ValueError:
        raise errors.unprocessable("offset and limit are integers") from None
    return items[offset:] if limit < 0 else items[offset:offset + limit]


def _schema_id(request: Request) -> int:
    text = request.path_params["schema_id"]
    if not text.isdigit():
        raise errors.schema_not_found()
    return int(text)


def _schema_body(schema: StoredSchema, text: str) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if schema.schema_type != "AVRO":
        body["schemaType"] = schema.schema_type
    if schema.references:
        body["references"] = [r.to_json() for r in schema.references]
    body["schema"] = text
    return body


def _version_body(version: SubjectVersion, text: str) -> dict[str, Any]:
    return {"subject": version.subject, "version": version.version,
            "id": version.schema.schema_id, **_schema_body(version.schema, text)}


def _parse_request(body: bytes) -> SchemaRequest:
    try:
        data = json.loads(body)
    except ValueError:
        raise errors.RegistryError(400, 400, "Unrecognized field or malformed JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("schema"), str):
        raise errors.unprocessable("The request must be a JSON object with a 'schema' string")
    schema_type = (data.get("schemaType") or "AVRO").upper()
    if schema_type not in SCHEMA_TYPES:
        raise errors.unprocessable(f"Invalid schema type {schema_type}")
    try:
        references = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                           for r in data.get("references") or ())
        schema_id = None if data.get("id") in (None, -1) else int(data["id"])
        version = None if data.get("version") in (None, -1) else int(data["version"])
    except (KeyError, TypeError, ValueError):
        raise errors.unprocessable("Invalid references, id or version") from None
    return SchemaRequest(schema_type, data["schema"], references, schema_id, version)


def _json_field(body: bytes, name: str) -> object:
    try:
        data = json.loads(body)
    except ValueError:
        raise errors.RegistryError(400, 400, "Unrecognized field or malformed JSON") from None
    return data.get(name) if isinstance(data, dict) else None


def create_app(registry: SchemaRegistry, forward: Forward | None = None,
               ) -> tuple[ASGIApp, DirectAnswer]:
    """The API over ``registry`` (writes go through ``forward`` first, when given),
    and the answers of its calls that serializers make for the records they write and
    read (``GET /schemas/ids/{id}``, ``POST /subjects/{s}``), given on the spot when
    they need neither a thread nor another instance (see :mod:`.serving`)."""

    routes: list[Route] = []
    direct: list[tuple[str, re.Pattern[str], Callable[[Request, bytes], Response | None]]] = []

    def endpoint(handler: Handler, writes: bool, parses: bool | Callable[[Request, bytes], bool],
                 ) -> tuple[Callable[[Request], Awaitable[Response]],
                            Callable[[Request, bytes], Response | None]]:
        def now(request: Request, body: bytes) -> Response | None:
            """The answer, unless it is a write or parses a schema: a write waits for
            the topic, a parse takes CPU, and neither may hold up the event loop.
            Reads are lookups in memory, answered here."""
            try:
                if writes or (parses(request, body) if callable(parses) else parses):
                    return None
                return _result(handler(request, body))
            except errors.RegistryError as exc:
                return _error(exc)

        async def answer(request: Request) -> Response:
            # Routed on the path as sent (see create_app's end): a segment's escapes
            # are undone here, once it is known to be one segment.
            request.scope["path_params"] = {
                name: unquote(value) for name, value in request.path_params.items()}
            body = await request.body()
            answered = now(request, body)
            if answered is not None:
                return answered
            try:
                if writes and forward is not None:
                    forwarded = await forward(request, body)
                    if forwarded is not None:
                        return forwarded
                return _result(await run_in_threadpool(handler, request, body))
            except errors.RegistryError as exc:
                return _error(exc)
        return answer, now

    def add(path: str, methods: list[str], writes: bool = False,
            parses: bool | Callable[[Request, bytes], bool] = False, hot: bool = False,
            ) -> Callable[[Handler], Handler]:
        """``hot``: answered on the spot too, when it can be."""
        def register(handler: Handler) -> Handler:
            answer, now = endpoint(handler, writes, parses)
            routes.append(Route(path, answer, methods=methods))
            if hot:
                # A path parameter is one path segment, as Starlette's own.
                pattern = re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path))
                direct.extend((method, pattern, now) for method in methods)
            return handler
        return register

    def answer_directly(method: str, path: str, query: bytes, body: bytes) -> Response | None:
        # The call every deserializer makes, without a Request (only ``format`` matters
        # in its query; confluent-kafka's client sends ``subject``).
        if (method == "GET" and path.startswith("/schemas/ids/") and path[13:].isdigit()
                and b"format" not in query):
            try:
                return id_answer(int(path[13:]))
            except errors.RegistryError as exc:
                return _error(exc)
        for wanted, pattern, now in direct:
            found = pattern.fullmatch(path)
            if found is not None and method == wanted:
                return now(Request({"type": "http", "method": method, "path": path,
                                    "query_string": query, "headers": [],
                                    "path_params": found.groupdict()}), body)
        return None

    @add("/", ["GET"])
    def root(request: Request, body: bytes) -> Any:
        return {}

    @add("/schemas/types", ["GET"])
    def schema_types(request: Request, body: bytes) -> Any:
        return list(SCHEMA_TYPES)

    @add("/schemas", ["GET"])
    def schemas(request: Request, body: bytes) -> Any:
        found = registry.all_versions(request.query_params.get("subjectPrefix", ""),
                                      _flag(request, "deleted"), _flag(request, "latestOnly"))
        return [_version_body(v, v.schema.text) for v in found]

    id_answers: dict[int, tuple[StoredSchema, Response]] = {}
    """Each id's answer, encoded once: an id's schema never changes (though a permanent
    delete may remove it, and the state then knows it no more)."""

    def id_answer(schema_id: int) -> Response:
        found = registry.schema(schema_id)
        cached = id_answers.get(schema_id)
        if cached is None or cached[0] is not found:
            cached = id_answers[schema_id] = (found, KeptAnswer(
                _schema_body(found, found.text), media_type=MEDIA_TYPE))
        return cached[1]

    @add("/schemas/ids/{schema_id}", ["GET"], hot=True)
    def schema_by_id(request: Request, body: bytes) -> Any:
        fmt = request.query_params.get("format")
        if fmt is None:
            return id_answer(_schema_id(request))
        found = registry.schema(_schema_id(request))
        text = registry.text_in_format(found, fmt)
        return id_answer(found.schema_id) if text is found.text else _schema_body(found, text)

    @add("/schemas/ids/{schema_id}/schema", ["GET"])
    def raw_schema_by_id(request: Request, body: bytes) -> Any:
        return Response(registry.schema(_schema_id(request)).text, media_type=MEDIA_TYPE)

    @add("/schemas/ids/{schema_id}/versions", ["GET"])
    def schema_versions(request: Request, body: bytes) -> Any:
        found = registry.schema_versions(_schema_id(request), _flag(request, "deleted"))
        return [{"subject": v.subject, "version": v.version} for v in found]

    @add("/schemas/ids/{schema_id}/subjects", ["GET"])
    def schema_subjects(request: Request, body: bytes) -> Any:
        found = registry.schema_versions(_schema_id(request), _flag(request, "deleted"))
        return sorted({v.subject for v in found})

    @add("/subjects", ["GET"])
    def subjects(request: Request, body: bytes) -> Any:
        return _page(request, registry.subjects(
            _flag(request, "deleted"), request.query_params.get("subjectPrefix", ""),
            _flag(request, "deleted_only")))

    def lookup_parses(request: Request, body: bytes) -> bool:
        return not registry.parsed_already(_parse_request(body), _flag(request, "normalize"))

    @add("/subjects/{subject}", ["POST"], parses=lookup_parses, hot=True)
    def lookup(request: Request, body: bytes) -> Any:
        found = registry.lookup(request.path_params["subject"], _parse_request(body),
                                _flag(request, "normalize"), _flag(request, "deleted"))
        return _version_body(found, found.schema.text)

    @add("/subjects/{subject}", ["DELETE"], writes=True)
    def delete_subject(request: Request, body: bytes) -> Any:
        return registry.delete_subject(request.path_params["subject"],
                                       _flag(request, "permanent"))

    @add("/subjects/{subject}/versions", ["GET"])
    def versions(request: Request, body: bytes) -> Any:
        return _page(request, registry.versions(
            request.path_params["subject"], _flag(request, "deleted"),
            _flag(request, "deleted_only")))

    @add("/subjects/{subject}/versions", ["POST"], writes=True)
    def register(request: Request, body: bytes) -> Any:
        schema_id = registry.register(request.path_params["subject"], _parse_request(body),
                                      _flag(request, "normalize"))
        return {"id": schema_id}

    @add("/subjects/{subject}/versions/{version}", ["GET"])
    def version(request: Request, body: bytes) -> Any:
        found = registry.version(request.path_params["subject"],
                                 request.path_params["version"], _flag(request, "deleted"))
        return _version_body(found, registry.text_in_format(
            found.schema, request.query_params.get("format")))

    @add("/subjects/{subject}/versions/{version}/schema", ["GET"])
    def raw_version(request: Request, body: bytes) -> Any:
        found = registry.version(request.path_params["subject"],
                                 request.path_params["version"], _flag(request, "deleted"))
        return Response(found.schema.text, media_type=MEDIA_TYPE)

    @add("/subjects/{subject}/versions/{version}/referencedby", ["GET"])
    def referenced_by(request: Request, body: bytes) -> Any:
        return registry.referenced_by(request.path_params["subject"],
                                      request.path_params["version"])

    @add("/contexts", ["GET"])
    def contexts(request: Request, body: bytes) -> Any:
        return ["."]  # the default context, the only one here

    @add("/subjects/{subject}/versions/{version}", ["DELETE"], writes=True)
    def delete_version(request: Request, body: bytes) -> Any:
        return registry.delete_version(request.path_params["subject"],
                                       request.path_params["version"],
                                       _flag(request, "permanent"))

    @add("/compatibility/subjects/{subject}/versions", ["POST"], parses=True)
    def check_all(request: Request, body: bytes) -> Any:
        return _compatibility(request, body, None)

    @add("/compatibility/subjects/{subject}/versions/{version}", ["POST"], parses=True)
    def check_one(request: Request, body: bytes) -> Any:
        return _compatibility(request, body, request.path_params["version"])

    def _compatibility(request: Request, body: bytes, version: str | None) -> Any:
        problems = registry.check(request.path_params["subject"], _parse_request(body),
                                  version, _flag(request, "normalize"))
        answer: dict[str, Any] = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            answer["messages"] = problems
        return answer

    @add("/config", ["GET"])
    def global_config(request: Request, body: bytes) -> Any:
        return {"compatibilityLevel": registry.compatibility_level()}

    @add("/config/{subject}", ["GET"])
    def subject_config(request: Request, body: bytes) -> Any:
        level = registry.compatibility_level(request.path_params["subject"],
                                             _flag(request, "defaultToGlobal"))
        return {"compatibilityLevel": level}

    @add("/config", ["PUT"], writes=True)
    def set_global_config(request: Request, body: bytes) -> Any:
        return {"compatibility": registry.set_compatibility(
            None, _json_field(body, "compatibility"))}

    @add("/config/{subject}", ["PUT"], writes=True)
    def set_subject_config(request: Request, body: bytes) -> Any:
        return {"compatibility": registry.set_compatibility(
            request.path_params["subject"], _json_field(body, "compatibility"))}

    @add("/config", ["DELETE"], writes=True)
    def delete_global_config(request: Request, body: bytes) -> Any:
        return {"compatibilityLevel": registry.delete_compatibility(None)}

    @add("/config/{subject}", ["DELETE"], writes=True)
    def delete_subject_config(request: Request, body: bytes) -> Any:
        return {"compatibilityLevel": registry.delete_compatibility(
            request.path_params["subject"])}

    @add("/mode", ["GET"])
    def global_mode(request: Request, body: bytes) -> Any:
        return {"mode": registry.mode()}

    @add("/mode/{subject}", ["GET"])
    def subject_mode(request: Request, body: bytes) -> Any:
        return {"mode": registry.mode(request.path_params["subject"],
                                      _flag(request, "defaultToGlobal"))}

    @add("/mode", ["PUT"], writes=True)
    def set_global_mode(request: Request, body: bytes) -> Any:
        return {"mode": registry.set_mode(None, _json_field(body, "mode"),
                                          _flag(request, "force"))}

    @add("/mode/{subject}", ["PUT"], writes=True)
    def set_subject_mode(request: Request, body: bytes) -> Any:
        return {"mode": registry.set_mode(request.path_params["subject"],
                                          _json_field(body, "mode"), _flag(request, "force"))}

    @add("/mode/{subject}", ["DELETE"], writes=True)
    def delete_subject_mode(request: Request, body: bytes) -> Any:
        return {"mode": registry.delete_mode(request.path_params["subject"])}

    routed = Starlette(routes=routes)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        """Route on the path as the client sent it, escapes kept: a subject may hold a
        "/", sent as "%2F" (Protobuf serializers register each imported file under its
        path, e.g. ``google/protobuf/timestamp.proto``), which the decoded path would
        split into segments that match no route."""
        if scope["type"] == "http" and "raw_path" in scope:
            scope = {**scope, "path": scope["raw_path"].decode("latin-1")}
        await routed(scope, receive, send)

    return app, answer_directly
