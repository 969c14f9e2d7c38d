"""Charts of docs/benchmarks.md, drawn from its own tables (so a chart always shows the numbers beside it).

`python bench/plots.py docs/benchmarks.md` (also run by `make bench`) writes PNGs next to the markdown and
returns their names; bench/run.py links them under "## Charts".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

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
    if len(section) < 2:
        return []
    lines = [line for line in section[1].split("\n## ", 1)[0].splitlines() if line.startswith("|")]
    if len(lines) < 3:
        return []
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row, strict=False)) for row in cells[2:]]


def number(text: str) -> float:
    found = re.search(r"-?\d+(?:\.\d+)?", text.replace("*", ""))
    return float(found.group()) if found else float("nan")


def draw(markdown: str, out_dir: Path) -> list[str]:
    """Write every chart whose table is there; returns the file names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def save(figure: object, key: str) -> None:
        figure.tight_layout()  # type: ignore[attr-defined]
        figure.savefig(out_dir / CHARTS[key], dpi=110)  # type: ignore[attr-defined]
        plt.close(figure)  # type: ignore[arg-type]
        written.append(CHARTS[key])

    decode = table(markdown, "Decode throughput")
    if decode:
        figure, axes = plt.subplots(figsize=(9, 3.8))
        names = [row["variant"].replace("`", "")[:44] for row in decode]
        values = [number(row["tokens/s"]) for row in decode]
        bars = axes.barh(names[::-1], values[::-1], color="#4c72b0")
        axes.bar_label(bars, fmt="%.1f", padding=3)
        axes.set_xlabel("decode tokens/s (128 tokens, greedy)")
        axes.set_title("Decode tokens/s: the bare loop (a) to a wasm guest (e)")
        axes.set_xlim(0, max(values) * 1.15)
        save(figure, "decode")

    batching = table(markdown, "Continuous batching")
    if batching:
        streams = [number(row["streams"]) for row in batching]
        figure, axes = plt.subplots(figsize=(7, 4))
        for column, label, style in (
            ("llmhost tok/s", "llmhost (engine)", "o-"),
            ("bare batched loop tok/s", "bare batched llama.cpp loop", "s--"),
            ("serialized tok/s", "serialized (one at a time)", "^:"),
        ):
            if column in batching[0]:
                axes.plot(streams, [number(row[column]) for row in batching], style, label=label)
        axes.set_xlabel("concurrent streams")
        axes.set_ylabel("aggregate tokens/s")
        axes.set_xticks(streams)
        axes.set_ylim(bottom=0)
        axes.set_title("Throughput against concurrent streams")
        axes.legend()
        save(figure, "streams")

        figure, axes = plt.subplots(figsize=(7, 4))
        for column, style in (("TTFT p50", "o-"), ("TTFT p95", "s--")):
            axes.plot(streams, [number(row[column]) for row in batching], style, label=column)
        axes.set_xlabel("concurrent streams")
        axes.set_ylabel("time to first token (ms)")
        axes.set_xticks(streams)
        axes.set_ylim(bottom=0)
        axes.set_title("Time to first token against concurrent streams")
        axes.legend()
        save(figure, "ttft")

    structured = table(markdown, "Structured output")
    pairs = []
    for row in structured:
        found = re.search(r"\((-?[\d.]+) ÷ (-?[\d.]+)\)", row.get("measure", ""))
        if found:
            measure = row["measure"]
            label = next((name for key, name in STRUCTURED_LABELS if measure.startswith(key)), measure[:30])
            pairs.append((label, float(found.group(1)), float(found.group(2))))
    if pairs:
        figure, axes = plt.subplots(figsize=(8, 3.8))
        positions = range(len(pairs))
        axes.bar([p - 0.2 for p in positions], [u for _, _, u in pairs], 0.4, label="unconstrained", color="#999999")
        axes.bar([p + 0.2 for p in positions], [c for _, c, _ in pairs], 0.4, label="constrained", color="#dd8452")
        axes.set_xticks(list(positions), [label for label, _, _ in pairs], fontsize=9)
        axes.set_ylabel("tokens/s")
        axes.set_title("Constrained (JSON schema) against unconstrained throughput")
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
