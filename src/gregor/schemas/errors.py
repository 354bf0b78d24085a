"""Confluent's registry errors: HTTP status, ``error_code`` and message.

Clients branch on ``error_code`` (confluent-kafka's serializers treat 40401/40403 as
"not registered yet"), so each error here carries Confluent's code and wording.
"""

from __future__ import annotations


class RegistryError(Exception):
    """An answer with ``{"error_code": code, "message": message}`` and ``status``."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(404, 40403, "Schema not found" if schema_id is None
                         else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set "
                                     "permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before "
                                     "being permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40406, f"Subject '{subject}' Version {version} was soft "
                                     "deleted.Set permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40407, f"Subject '{subject}' Version {version} was not "
                                     "deleted first before being permanently deleted")


def subject_config_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level "
                                     "compatibility configured")


def subject_mode_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level "
                                     "mode configured")


def incompatible(subject: str, messages: list[str]) -> RegistryError:
    return RegistryError(409, 409, "Schema being registered is incompatible with an earlier "
                                   f"schema for subject \"{subject}\", details: {messages}")


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema {detail}")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(422, 42202, f"The specified version '{version}' is not a valid "
                                     "version id. Allowed values are between [1, 2^31-1] "
                                     "and the string \"latest\"")


def invalid_compatibility_level(level: object) -> RegistryError:
    return RegistryError(422, 42203, f"Invalid compatibility level {level}. Valid values "
                                     "are none, backward, forward, full, backward_transitive, "
                                     "forward_transitive, and full_transitive")


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(422, 42204, f"Invalid mode {mode}. Valid values are READWRITE, "
                                     "READONLY and IMPORT")


def operation_not_permitted(detail: str) -> RegistryError:
    return RegistryError(422, 42205, detail)


def reference_exists(subject: str, version: int) -> RegistryError:
    return RegistryError(422, 42206, "One or more references exist to the schema "
                                     f"{{subject={subject},version={version}}}.")


def unprocessable(detail: str) -> RegistryError:
    """A body that is not the JSON the call takes (Confluent answers 422 with code 422)."""
    return RegistryError(422, 422, detail)


def store_error(detail: str) -> RegistryError:
    return RegistryError(500, 50001, f"Error while storing: {detail}")


def store_timeout(detail: str) -> RegistryError:
    return RegistryError(500, 50002, f"Timed out: {detail}")


def forwarding_error(detail: str) -> RegistryError:
    return RegistryError(500, 50003, f"Error while forwarding the request to the primary: "
                                     f"{detail}")
