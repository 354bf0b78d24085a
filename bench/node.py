"""Node.js programs with the KafkaJS client that scripts/install-kafkajs.sh installs in
``node/``: the client tests' scenarios and the transactions bench's KafkaJS producer.

The programs live beside the Python that runs them; Node.js finds the packages through
``NODE_PATH``, so that one installation serves both."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

NODE_MODULES = Path(__file__).resolve().parent.parent / "node" / "node_modules"


def kafkajs_installed() -> bool:
    return shutil.which("node") is not None and (NODE_MODULES / "kafkajs").is_dir()


def node_command(script: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run ``script`` with the installed packages, and
    without KafkaJS 2's notice that its default partitioner changed (printed at every
    producer's start)."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not installed")
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES), "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    return [node, str(script), *args], env
