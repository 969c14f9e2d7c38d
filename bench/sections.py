"""A benchmark section run on its own (`python bench/NAME.py`) replaces its own section of docs/benchmarks.md."""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def replace_section(heading: str, lines: list[str], out: Path = BENCHMARKS) -> None:
    """Put `lines` (which start with `heading`) in place of that section, or at the end when there is none."""
    text = out.read_text() if out.is_file() else "# Benchmarks\n\n"
    before, found, after = text.partition(heading)
    rest = after.split("\n## ", 1)[1] if found and "\n## " in after else ""
    if not found:
        before, rest = text, ""
    out.write_text(before.rstrip("\n") + "\n\n" + "\n".join(lines) + ("\n## " + rest if rest else "\n"))
