"""Guest sources are parsed (syntax check, world detection) on whichever threads build guests: the test fixtures
and `llmhost` itself build several at once. CPython 3.11's ast.parse is not safe to run on two threads at once
(its AST recursion depth is interpreter-wide; a garbage collection in the middle lets the other thread in), so
`build.world.parse` runs one parse at a time."""

from __future__ import annotations

import threading
from pathlib import Path

from llmhost.toolchains.world import parse

SOURCE = (Path(__file__).resolve().parents[1] / "guests" / "http_probe" / "app.py").read_text(encoding="utf-8")


class _Cycle:
    """Garbage in reference cycles, so collections run (and finalizers switch threads) while others parse."""

    def __del__(self) -> None:
        sum(range(50))


def test_guest_sources_parse_on_two_threads_at_once_while_the_collector_runs() -> None:
    errors: list[BaseException] = []
    trees: list[object] = []

    def parse_many() -> None:
        for _ in range(150):
            try:
                trees.append(parse(SOURCE, "app.py"))
            except BaseException as error:  # SystemError: AST constructor recursion depth mismatch
                errors.append(error)

    def churn() -> None:
        for _ in range(100_000):
            a, b = _Cycle(), _Cycle()
            a.other, b.other = b, a  # type: ignore[attr-defined]

    threads = [threading.Thread(target=parse_many) for _ in range(2)] + [threading.Thread(target=churn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(trees) == 300
