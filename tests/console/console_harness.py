"""``gregor console`` as a process, and its JSON API spoken over plain HTTP."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

START_TIMEOUT_S = 30


@dataclass
class Console:
    url: str
    process: subprocess.Popen
    # The console's output after its first line (librdkafka's log): read all along, or
    # a full pipe would block the console's next write, and its Kafka calls with it.
    output: deque[str] = field(default_factory=lambda: deque(maxlen=200))

    @classmethod
    def start(cls, bootstrap: str, refresh_s: float = 1.0,
              metrics: Sequence[str] = (), schema_registry: str | None = None,
              client_properties: Sequence[str] = ()) -> Console:
        """A console on a free port, scraping ``metrics`` (URLs), showing the schemas of
        ``schema_registry`` (a URL), its clients configured with ``client_properties``
        (librdkafka's ``name=value``); it prints its address once it listens."""
        process = subprocess.Popen(
            [sys.executable, "-m", "gregor.cli.main", "console", "--bootstrap-server", bootstrap,
             "--port", "0", "--refresh", str(refresh_s),
             *(argument for url in metrics for argument in ("--metrics", url)),
             *(("--schema-registry", schema_registry) if schema_registry else ()),
             *(argument for item in client_properties for argument in ("-X", item))],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"on (http://\S+/) ", line)
        if found is None:
            process.kill()
            raise RuntimeError(f"gregor console did not start: {line}{process.stdout.read()}")
        console = cls(found.group(1), process)
        threading.Thread(target=console.output.extend, args=(process.stdout,),
                         name="console-output", daemon=True).start()
        return console

    def stop(self) -> None:
        """Stop the console; raise if it had died on its own (librdkafka aborts a process
        on a failed assertion) instead of hiding that behind failed page loads."""
        if self.process.poll() is not None:
            raise RuntimeError(f"gregor console exited with {self.process.returncode}:\n"
                               + "".join(self.output))
        self.process.terminate()
        try:
            self.process.wait(START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def page(self, route: str) -> str:
        """The address of a page: ``topics/orders/messages`` -> ``http://.../#/topics/...``."""
        return f"{self.url}#/{route}"

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(HTTP status, JSON answer) of an API call; errors are answers too."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def events(self, path: str) -> Iterator[tuple[str, Any]]:
        """The (event, data) pairs of a server-sent event stream, as they come."""
        with urllib.request.urlopen(self.url.rstrip("/") + path, timeout=60) as response:
            kind, data = None, None
            for raw in response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[len("event: "):]
                elif line.startswith("data: "):
                    data = json.loads(line[len("data: "):])
                elif not line and kind is not None:
                    yield kind, data
                    kind, data = None, None


def q(text: str) -> str:
    """A path segment or query value, escaped."""
    return quote(text, safe="")
