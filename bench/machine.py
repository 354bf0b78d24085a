"""The machine a run measured: figures only compare within one machine and one run."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import confluent_kafka
import psutil


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.system()


def mount_of(path: Path) -> tuple[str, str]:
    """``(device, filesystem type)`` of the mount holding ``path``."""
    best = ("?", "?", "")
    target = str(path.resolve())
    for line in Path("/proc/mounts").read_text().splitlines():
        device, mount_point, fs_type = line.split()[:3]
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best[2]):
            best = (device, fs_type, mount_point)
    return best[0], best[1]


def _disk(path: Path) -> str:
    device, fs_type = mount_of(path)
    usage = shutil.disk_usage(path)
    return (f"{device} ({fs_type}), {usage.total / 2**30:.0f} GiB, "
            f"{usage.free / 2**30:.0f} GiB free")


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True, cwd=Path(__file__).parent)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def describe(workdir: Path) -> dict[str, str]:
    return {
        "CPU": f"{_cpu_model()}, {os.cpu_count()} cores",
        "memory": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "OS": f"{_os_name()}, Linux {platform.release()}",
        "disk (data directories)": _disk(workdir),
        "Python": platform.python_version(),
        "load generator": (f"confluent-kafka {metadata.version('confluent-kafka')} (librdkafka "
                           f"{confluent_kafka.libversion()[0]}), redis-py "
                           f"{metadata.version('redis')}, nats-py {metadata.version('nats-py')}"),
        "gregor commit": _git_commit(),
        "command": " ".join([Path(sys.executable).name, "-m", "bench", *sys.argv[1:]]),
    }
