"""Sections that other benchmarks keep in docs/benchmarks.md, between HTML comment markers.

The issues' targets are read in docs/benchmarks.md, so bench.cluster_bench and
bench.txn_bench put their tables there too, each between ``<!-- name -->`` and
``<!-- /name -->``. ``python -m bench`` writes the document anew from its own results;
it carries these sections over (:func:`kept_sections`) instead of dropping them.
"""

from __future__ import annotations

import re
from pathlib import Path

_SECTION = re.compile(r"<!-- (?P<name>[\w.-]+) -->\n.*?<!-- /(?P=name) -->\n", re.DOTALL)


def write_section(path: Path, name: str, body: str) -> None:
    """Put ``body`` between ``name``'s markers in ``path``: replaced if there, else appended."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    section = f"{start}\n{body.strip()}\n{end}\n"
    text = path.read_text() if path.exists() else ""
    first, last = text.find(start), text.find(end)
    if first >= 0 and last > first:
        rest = text[last + len(end):].lstrip("\n")
        text = text[:first] + section + ("\n" + rest if rest else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def kept_sections(path: Path) -> list[str]:
    """Every marked section of ``path`` (if it exists), markers included, in order."""
    if not path.exists():
        return []
    return [match.group(0) for match in _SECTION.finditer(path.read_text())]
