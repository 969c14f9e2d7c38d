"""Charts of docs/benchmarks.md, drawn from its own tables (so a chart always shows the numbers beside it).

`python bench/plots.py docs/benchmarks.md` (also run by `make bench`) writes PNGs next to the markdown and
returns their names; bench/run.py links them under "## Charts".
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

CHARTS = {
    "decode": "benchmarks-decode.png",
    "streams": "benchmarks-streams.png",
    "ttft": "benchmarks-ttft.png",
    "structured": "benchmarks-structured.png",
}


STRUCTURED_LABELS = [
    ("llmhost", "llmhost (llguidance masks)"),
    ("anchor", "llama.cpp's grammar sampler"),
    ("8 concurrent", "llmhost, 8 streams (half constrained)"),
]


def table(markdown: str, heading: str) -> list[dict[str, str]]:
    """The first table under `## heading`, as rows keyed by its header cells."""
    section = markdown.split(f"## {heading}\n", 1)
    return _first_table(section[1].split("\n## ", 1)[0]) if len(section) == 2 else []


def _first_table(text: str) -> list[dict[str, str]]:
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break  # the table ended: a later one (another model's) is not part of it
    if len(lines) < 3:
        return []
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row, strict=False)) for row in cells[2:]]


def tables_by_model(markdown: str, heading: str) -> dict[str, list[dict[str, str]]]:
    """The rows under `## heading` of each model: the first table under each `### model` sub-heading, else the
    section's first table grouped by its `model` column; {"": rows} when neither (a table of one model)."""
    section = markdown.split(f"## {heading}\n", 1)
    if len(section) < 2:
        return {}
    parts = re.split(r"^### (.+)$", section[1].split("\n## ", 1)[0], flags=re.MULTILINE)
    if len(parts) > 1:
        found = {title.split()[0]: _first_table(body) for title, body in zip(parts[1::2], parts[2::2], strict=True)}
        return {model: rows for model, rows in found.items() if rows}
    rows = _first_table(parts[0])
    if rows and "model" in rows[0]:
        grouped: dict[str, list[dict[str, str]]] = {}
        for row in rows:
            grouped.setdefault(row["model"], []).append(row)
        return grouped
    return {"": rows} if rows else {}


def number(text: str) -> float:
    found = re.search(r"-?\d+(?:\.\d+)?", text.replace("*", ""))
    return float(found.group()) if found else float("nan")


def draw(markdown: str, out_dir: Path) -> list[str]:
    """Write every chart whose table is there, each model's figures side by side; returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def save(figure: object, key: str) -> None:
        figure.tight_layout()  # type: ignore[attr-defined]
        figure.savefig(out_dir / CHARTS[key], dpi=110)  # type: ignore[attr-defined]
        plt.close(figure)  # type: ignore[arg-type]
        written.append(CHARTS[key])

    def panels(count: int, width: float, height: float) -> tuple[Any, list[Any]]:
        """A figure with one panel per model, side by side."""
        figure, axes = plt.subplots(1, count, figsize=(width * count, height), squeeze=False)
        return figure, list(axes[0])

    def against_streams(
        tables: dict[str, list[dict[str, str]]],
        lines: tuple[tuple[str, str, str], ...],
        ylabel: str,
        titles: tuple[str, str],
        key: str,
    ) -> None:
        """One panel per model: the `lines` (column, label, style) against the `streams` column; `titles`: the
        title after a model's name, and the title where the table names no model."""
        figure, all_axes = panels(len(tables), 6, 4)
        for axes, (model, rows) in zip(all_axes, tables.items(), strict=True):
            streams = [number(row["streams"]) for row in rows]
            for column, label, style in lines:
                if column in rows[0]:
                    axes.plot(streams, [number(row[column]) for row in rows], style, label=label)
            axes.set_xlabel("concurrent streams")
            axes.set_ylabel(ylabel)
            axes.set_xticks(streams)
            axes.set_ylim(bottom=0)
            axes.set_title(f"{model}: {titles[0]}" if model else titles[1])
            axes.legend()
        save(figure, key)

    decode = tables_by_model(markdown, "Decode throughput")
    if decode:
        # One bar per model for each variant, grouped; the variants in the first model's order.
        names = [row["variant"] for row in next(iter(decode.values()))]
        figure, axes = plt.subplots(figsize=(9, 2 + 0.3 * len(names) * len(decode)))
        height = 0.8 / len(decode)
        top = 0.0
        for index, (model, rows) in enumerate(decode.items()):
            rate = {row["variant"]: number(row["tokens/s"]) for row in rows}
            positions = [len(names) - 1 - i + 0.4 - height * (index + 0.5) for i in range(len(names))]
            values = [rate.get(name, float("nan")) for name in names]
            bars = axes.barh(positions, values, height, label=model or None)
            axes.bar_label(bars, fmt="%.1f", padding=3, fontsize=8)
            top = max([top, *(v for v in values if not math.isnan(v))])
        axes.set_yticks(range(len(names)), [name.replace("`", "")[:44] for name in names[::-1]])
        axes.set_xlabel("decode tokens/s (128 tokens, greedy)")
        axes.set_title("Decode tokens/s: the bare loop (a) to a wasm guest (e)")
        axes.set_xlim(0, top * 1.15)
        if len(decode) > 1:  # under the axes: inside, it would cover the bars' labels
            axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=len(decode), frameon=False)
        save(figure, "decode")

    batching = tables_by_model(markdown, "Continuous batching")
    if batching:
        against_streams(
            batching,
            (
                ("llmhost tok/s", "llmhost (engine)", "o-"),
                ("bare batched loop tok/s", "bare batched llama.cpp loop", "s--"),
                ("serialized tok/s", "serialized (one at a time)", "^:"),
            ),
            "aggregate tokens/s",
            ("throughput against streams", "Throughput against concurrent streams"),
            "streams",
        )
        against_streams(
            batching,
            (("TTFT p50", "TTFT p50", "o-"), ("TTFT p95", "TTFT p95", "s--")),
            "time to first token (ms)",
            ("time to first token", "Time to first token against streams"),
            "ttft",
        )

    structured: dict[str, list[tuple[str, float, float]]] = {}
    for model, rows in tables_by_model(markdown, "Structured output").items():
        for row in rows:
            found = re.search(r"\((-?[\d.]+) ÷ (-?[\d.]+)\)", row.get("measure", ""))
            if found:
                measure = row["measure"]
                label = next((name for key, name in STRUCTURED_LABELS if measure.startswith(key)), measure[:30])
                structured.setdefault(model, []).append((label, float(found.group(1)), float(found.group(2))))
    if structured:
        figure, all_axes = panels(len(structured), 8, 3.8)
        for axes, (model, pairs) in zip(all_axes, structured.items(), strict=True):
            slots = range(len(pairs))
            axes.bar([p - 0.2 for p in slots], [u for _, _, u in pairs], 0.4, label="unconstrained", color="#999999")
            axes.bar([p + 0.2 for p in slots], [c for _, c, _ in pairs], 0.4, label="constrained", color="#dd8452")
            axes.set_xticks(list(slots), [label for label, _, _ in pairs], fontsize=9)
            axes.set_ylabel("tokens/s")
            title = "Constrained (JSON schema) against unconstrained throughput"
            axes.set_title(f"{model}: {title}" if model else title, fontsize=10)
            axes.legend()
        save(figure, "structured")
    return written


def charts_section(names: list[str]) -> list[str]:
    """The markdown that shows the charts (images next to docs/benchmarks.md)."""
    titles = {
        CHARTS["decode"]: "Decode tokens/s, each variant",
        CHARTS["streams"]: "Throughput against concurrent streams",
        CHARTS["ttft"]: "Time to first token, p50 and p95",
        CHARTS["structured"]: "Constrained against unconstrained",
    }
    lines = ["## Charts", "", "Drawn by bench/plots.py from the tables above.", ""]
    for name in names:
        lines += [f"![{titles[name]}]({name})", ""]
    return lines


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/benchmarks.md")
    print("\n".join(draw(path.read_text(), path.parent)))
