"""BROKER_LOGGER configs (resource type 8): each Python logger's level, read and changed
while the broker runs, as ``kafka-configs.sh --entity-type broker-loggers`` and admin
clients do it with Kafka's log4j loggers.

Levels are spoken in Kafka's names (FATAL, ERROR, WARN, INFO, DEBUG, TRACE; TRACE is
Python's DEBUG, there being nothing finer). A logger without a level of its own
reports the level it inherits. Deleting a logger's level makes it inherit again;
the root logger's cannot be deleted. Changes are this broker's alone and last until
it stops, as Kafka's do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gregor.cluster.controller import ControllerError
from gregor.config import ConfigError
from gregor.protocol.errors import ErrorCode

BROKER_LOGGER_RESOURCE = 8
ROOT_LOGGER = "root"
_SET, _DELETE = 0, 1
_TO_PYTHON = {"FATAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARN": logging.WARNING,
              "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": logging.DEBUG}
_TO_KAFKA = {logging.CRITICAL: "FATAL", logging.ERROR: "ERROR", logging.WARNING: "WARN",
             logging.INFO: "INFO", logging.DEBUG: "DEBUG", logging.NOTSET: "TRACE"}


def _loggers() -> dict[str, logging.Logger]:
    """Every logger this process has made, by name, and the root; the parents of named
    ones too (``gregor.cluster``), whose level their children without one inherit."""
    names = list(logging.Logger.manager.loggerDict)
    return {ROOT_LOGGER: logging.getLogger(), **{name: logging.getLogger(name) for name in names}}


def _kafka_level(logger: logging.Logger) -> str:
    level = logger.getEffectiveLevel()
    return _TO_KAFKA.get(level) or logging.getLevelName(level)


def describe(keys: Iterable[str] | None) -> list[tuple[str, str]]:
    """(logger name, its level) for the loggers asked (all when ``keys`` is None)."""
    loggers = _loggers()
    names = sorted(loggers) if keys is None else [k for k in keys if k in loggers]
    return [(name, _kafka_level(loggers[name])) for name in names]


def alter(changes: Iterable[tuple[int, str, str | None]], validate_only: bool) -> None:
    """IncrementalAlterConfigs' (operation, logger, level) entries, all checked before
    any is applied: INVALID_CONFIG for an unknown logger or level, INVALID_REQUEST for
    an operation a logger's level has no sense for (APPEND, SUBTRACT) or for deleting
    the root's."""
    loggers = _loggers()
    applied: list[tuple[logging.Logger, int]] = []
    for operation, name, value in changes:
        logger = loggers.get(name)
        if logger is None:
            raise ConfigError(f"Logger {name} does not exist!")
        if operation == _SET:
            level = _TO_PYTHON.get((value or "").upper())
            if level is None:
                raise ConfigError(f"Cannot set the log level of {name} to {value} as it is "
                                  f"not a supported log level. Valid log levels are "
                                  f"{', '.join(_TO_PYTHON)}")
            applied.append((logger, level))
        elif operation == _DELETE:
            if name == ROOT_LOGGER:
                raise ControllerError(ErrorCode.invalid_request,
                                      "Removing the log level of the root logger is not "
                                      "allowed")
            applied.append((logger, logging.NOTSET))
        else:
            raise ControllerError(ErrorCode.invalid_request,
                                  f"Operation {operation} is not allowed for BROKER_LOGGER "
                                  "configs")
    if not validate_only:
        for logger, level in applied:
            logger.setLevel(level)
