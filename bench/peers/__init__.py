"""The systems under test: each starts its server, stops it and removes what it left.

``start`` brings the server up on a free loopback port with its data under the
benchmark's work directory; ``stop`` shuts it down the way its users would;
``cleanup`` kills it if still alive and deletes its data (it runs in a
``finally``, after errors and Ctrl-C too).
"""

from __future__ import annotations

from typing import Protocol

from bench.clients import StreamClient


class Peer(Protocol):
    name: str
    # What the server stores records in and when it acknowledges them: the
    # fairness caveat that goes beside every figure.
    storage: str
    # What drives it; a pure-Python client sets the pace of its figures, which
    # the report then says beside them.
    load_generator: str
    python_client: bool

    def version(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def cleanup(self) -> None: ...

    def server_pids(self) -> list[int]: ...

    def client(self) -> StreamClient: ...
