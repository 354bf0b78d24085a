"""``gregor console`` refusing to start, in words that say what to run."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import gregor.console.server
from gregor.cli.main import main


def test_missing_front_end_says_how_to_build_it(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(gregor.console.server, "WEB_DIST", tmp_path / "dist")
    assert main(["console", "--bootstrap-server", "127.0.0.1:9", "--port", "0"]) == 1
    assert capsys.readouterr().err == (
        "gregor: error: the console's front end is not built: run scripts/build-console.sh "
        "(scripts/setup.sh console runs it too)\n")


def test_port_in_use_is_refused_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["console", "--bootstrap-server", "127.0.0.1:9",
                     "--port", str(port)]) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_metrics_must_be_a_url(capsys: pytest.CaptureFixture[str]) -> None:
    # host:port alone is what a Kafka user types for a broker; a scrape needs the URL.
    assert main(["console", "--bootstrap-server", "127.0.0.1:9", "--port", "0",
                 "--metrics", "127.0.0.1:9644"]) == 1
    assert capsys.readouterr().err == (
        "gregor: error: --metrics takes http://HOST:PORT/metrics, not '127.0.0.1:9644'\n")
