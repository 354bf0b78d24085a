"""``gregor schemas`` run as users run it, against a registry process on a broker."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from test_cli import fails, ok

from gregor.schemas.process import RegistryProcess


def schemas(registry: RegistryProcess, *args: str, input: bytes | None = None) -> str:
    return ok(None, "schemas", "--registry", registry.url, *args, input=input)


def record(*fields: dict) -> bytes:
    return json.dumps({"type": "record", "name": "Order", "fields": list(fields)}).encode()


def test_register_list_describe_check_delete(registry: RegistryProcess,
                                             tmp_path: Path) -> None:
    subject = f"orders-{uuid.uuid4().hex[:8]}-value"
    first = tmp_path / "order.avsc"
    first.write_bytes(record({"name": "id", "type": "long"}))
    schema_id = int(schemas(registry, "register", subject, str(first)))
    listed = schemas(registry, "list", "--prefix", subject).splitlines()
    assert listed[0].split() == ["SUBJECT", "VERSION", "ID", "TYPE"]
    assert listed[1].split() == [subject, "1", str(schema_id), "AVRO"]
    described = schemas(registry, "describe", subject)
    assert f"id:            {schema_id}" in described
    assert "compatibility: BACKWARD (global)" in described
    assert '"name": "Order"' in described

    breaking = record({"name": "id", "type": "long"}, {"name": "total", "type": "double"})
    assert schemas(registry, "check", subject, "-", input=record(
        {"name": "id", "type": "long"},
        {"name": "total", "type": "double", "default": 0})).strip() == "compatible"
    result = fails(None, "schemas", "--registry", registry.url, "register", subject, "-",
                   input=breaking)
    assert "incompatible" in result and "409" in result

    assert schemas(registry, "delete", subject).strip() == f"deleted {subject} versions 1"
    assert "40401" in fails(None, "schemas", "--registry", registry.url, "describe", subject)
    assert schemas(registry, "delete", subject, "--permanent").strip() == \
        f"deleted {subject} versions 1"


def test_unreachable_registry_is_one_line(tmp_path: Path) -> None:
    assert "cannot reach the schema registry" in fails(
        None, "schemas", "--registry", "http://127.0.0.1:9", "list")
