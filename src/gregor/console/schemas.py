"""The console's view of a schema registry (``gregor console --schema-registry URL``):
subjects, their versions and the difference between two, and message values in
Confluent's framing decoded into their fields.

Everything goes through confluent-kafka's registry client, so any registry with
Confluent's API serves; its errors become the console's (404 for what does not exist,
502 for a registry that fails).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from confluent_kafka.schema_registry.common._httpx_compat import httpx
from confluent_kafka.schema_registry.error import SchemaRegistryError

from gregor.cli.errors import CliError
from gregor.console.admin import NotFound
from gregor.schemas.framed_values import FramedValueDecoder

T = TypeVar("T")


class RegistryView:
    def __init__(self, url: str) -> None:
        self.url = url
        self.values = FramedValueDecoder(url)
        self.client = self.values.client

    def decoded(self, value: bytes | None) -> dict[str, Any]:
        """``value_schema_id`` and ``value_decoded`` for a framed value, else nothing."""
        found = self.values.decode(value)
        return {} if found is None else {"value_schema_id": found[0], "value_decoded": found[1]}

    def subjects(self) -> list[dict[str, Any]]:
        subjects = self._call(self.client.get_subjects)
        rows = []
        for subject in subjects:
            latest = self._call(partial(self.client.get_latest_version, subject))
            rows.append({"subject": subject, "version": latest.version, "id": latest.schema_id,
                         "type": latest.schema.schema_type or "AVRO"})
        return rows

    def subject(self, subject: str) -> dict[str, Any]:
        versions = self._call(lambda: self.client.get_versions(subject))
        shown = []
        for number in versions:
            version = self._call(partial(self.client.get_version, subject, number))
            shown.append({"version": version.version, "id": version.schema_id,
                          "type": version.schema.schema_type or "AVRO",
                          "references": [{"name": r.name, "subject": r.subject,
                                          "version": r.version}
                                         for r in version.schema.references or ()],
                          "schema": _pretty(version.schema.schema_str or "")})
        level = self._call(self.client.get_compatibility)
        try:
            level = self.client.get_compatibility(subject)
        except SchemaRegistryError as exc:
            if exc.error_code != 40408:  # none of its own: the global level holds
                raise CliError(f"schema registry: {exc.error_message}") from None
        return {"subject": subject, "compatibility": level, "versions": shown}

    def diff(self, subject: str, old: int, new: int) -> list[str]:
        """The unified diff of two versions' schemas, pretty-printed."""
        texts = [_pretty(self._call(partial(self.client.get_version, subject, v))
                         .schema.schema_str or "").splitlines()
                 for v in (old, new)]
        return list(difflib.unified_diff(texts[0], texts[1], f"version {old}",
                                         f"version {new}", lineterm=""))

    @staticmethod
    def _call(call: Callable[[], T]) -> T:
        try:
            return call()
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise NotFound(exc.error_message) from None
            raise CliError(f"schema registry: {exc.error_message}") from None
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach the schema registry: {exc}") from None


def _pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2)
    except ValueError:
        return text  # Protobuf, as registered
