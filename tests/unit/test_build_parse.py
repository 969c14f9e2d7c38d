"""Guest sources are parsed (syntax check, world detection) on whichever threads build guests: the test fixtures
and `llmhost` itself build several at once. CPython 3.11's ast.parse is not safe to run on two threads at once
(its AST recursion depth is interpreter-wide; a garbage collection in the middle lets the other thread in), so
`build.world.parse` runs one parse at a time, for the syntax check, the world and the import scan alike."""

from __future__ import annotations

import ast
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from llmhost.toolchains.imports import scan
from llmhost.toolchains.world import check_sources, detect_world, parse

GUEST = Path(__file__).resolve().parents[1] / "guests" / "http_probe"
SOURCE = (GUEST / "app.py").read_text(encoding="utf-8")


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


@pytest.mark.parametrize(
    "step",
    [lambda: check_sources(GUEST), lambda: detect_world(GUEST), lambda: scan(GUEST)],
    ids=["syntax", "world", "import-scan"],
)
def test_every_parse_of_a_build_waits_for_the_others(
    step: Callable[[], object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step a build parses in, on two threads: never two `ast.parse` calls at once (each made to take a while)."""
    original, active, most = ast.parse, [0], [0]

    def slow_parse(*args: object, **kwargs: object) -> ast.AST:
        active[0] += 1
        most[0] = max(most[0], active[0])
        time.sleep(0.01)
        try:
            return original(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            active[0] -= 1

    monkeypatch.setattr(ast, "parse", slow_parse)
    threads = [threading.Thread(target=lambda: [step() for _ in range(5)]) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
