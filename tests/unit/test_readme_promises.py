"""The table of grant promises (docs/grants.md, "What is checked, and what is not") names, for each, the tests that
back it: each named file and test exists (a renamed or deleted test would leave a promise unbacked)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_test_the_promises_table_names_exists() -> None:
    page = (REPO / "docs" / "grants.md").read_text(encoding="utf-8")
    start = page.index("| promise | test |")
    table = page[start : page.index("\n\n", start)]
    rows = table.splitlines()[2:]
    assert len(rows) >= 10
    for row in rows:
        cell = row.rsplit("|", 2)[1]
        files = re.findall(r"tests/[\w/]+\.py", cell)
        assert files, row
        for part in re.split(r";", cell):
            paths = re.findall(r"tests/[\w/]+\.py", part)
            if not paths:
                continue
            source = (REPO / paths[0]).read_text()
            for name in re.findall(r"`(test_\w+)`", part):
                assert re.search(rf"^def {name}\(", source, re.M), f"{paths[0]} has no {name}"
