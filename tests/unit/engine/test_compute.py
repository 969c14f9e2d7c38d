"""The compute thread: one thread runs every call handed to it, whoever hands it, and errors come back."""

from __future__ import annotations

import threading

import pytest

from llmhost.engine.local import compute


def test_calls_from_many_threads_all_run_on_one_thread_that_is_none_of_theirs() -> None:
    seen: list[int] = []
    callers: list[int] = []

    def call() -> None:
        callers.append(threading.get_ident())
        seen.append(compute.run(threading.get_ident))

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    call()
    assert len(seen) == 7 and len(set(seen)) == 1
    assert seen[0] not in callers


def test_a_result_and_an_exception_come_back_to_the_caller() -> None:
    assert compute.run(lambda a, b: a + b, 2, 3) == 5

    def fail() -> None:
        raise ValueError("from the compute thread")

    with pytest.raises(ValueError, match="from the compute thread"):
        compute.run(fail)
    assert compute.run(lambda: 1) == 1  # the thread survives it


def test_a_call_made_on_the_compute_thread_runs_there_at_once() -> None:
    # Nested use must not wait on itself (a one-thread pool would deadlock).
    assert compute.run(lambda: compute.run(threading.get_ident)) == compute.run(threading.get_ident)
