"""RegistryProcess: ``gregor schema-registry`` in a child process, as users run it, for
tests, benchmarks and tools, and plain HTTP calls to it (for the answers
confluent-kafka's client turns into exceptions or hides)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from typing import Any

START_TIMEOUT_S = 60


@dataclass
class RegistryProcess:
    """One registry for the cluster at ``bootstrap``, listening on ``listen`` (port 0
    picks one on the first start; a restart asks for the same again)."""

    bootstrap: str
    listen: str = "127.0.0.1:0"
    options: tuple[str, ...] = ()
    """More command-line arguments, e.g. ``("-X", "security.protocol=SASL_SSL")``."""
    url: str = ""
    process: subprocess.Popen | None = None
    # Read all along: a full pipe would block the registry's next write.
    output: deque[str] = field(default_factory=lambda: deque(maxlen=200))

    def start(self) -> RegistryProcess:
        """Start it and wait for the line it prints once it has read _schemas to its end
        and listens; a restart asks for the same port again (and forgets the output of
        the run before)."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gregor.cli.main", "schema-registry",
             "--bootstrap-server", self.bootstrap, "--listen", self.listen, *self.options],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        # Log lines (stderr, here in the same pipe) may come first: the election, on a
        # thread of its own, can log its result before the line is printed.
        self.output.clear()
        found = None
        for line in iter(self.process.stdout.readline, ""):
            if (found := re.search(r"on (http://(\S+))/ ", line)) is not None:
                break
            self.output.append(line)
        if found is None:
            # Its last words (a traceback being printed) first: killed at once, it lost them.
            try:
                rest, _ = self.process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                rest, _ = self.process.communicate()
            raise RuntimeError(f"schema registry did not start: {''.join(self.output)}{rest}")
        self.url, self.listen = found.group(1), found.group(2)
        threading.Thread(target=self.output.extend, args=(self.process.stdout,),
                         name="registry-output", daemon=True).start()
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(HTTP status, JSON answer); errors are answers too."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())
