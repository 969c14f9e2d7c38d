"""How long and how much a remote call may read.

Every remote call (a generation's step, tokenize, the model listing) has a total time bound besides the per-read
timeout: the run's or request's deadline when the host call runs within one (`within_deadline`, set by the run's
scope), else `read-timeout-s` as a whole. A server that sends keep-alives, empty chunks or a byte every few seconds
passes every per-read timeout, so the bound is kept by a watchdog that shuts the connection's socket down at the
end (a blocked `recv` then returns at once). Bodies read whole (a listing, an error, tokenize) are read up to a cap.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from llmhost.domain.limits import DEADLINE_MARGIN_S

MAX_ERROR_BODY_BYTES = 16 * 1024  # an error's body: only its message is quoted (300 characters)
MAX_LISTING_BYTES = 4 * 1024 * 1024  # GET /v1/models: thousands of models fit
MAX_JSON_BODY_BYTES = 64 * 1024 * 1024  # tokenize's answer: a million token ids fit

_TIME_LEFT: ContextVar[Callable[[], float | None] | None] = ContextVar("llmhost_remote_time_left", default=None)


@contextlib.contextmanager
def within_deadline(time_left: Callable[[], float | None]) -> Iterator[None]:
    """Remote calls made on this thread inside end before the deadline `time_left` reads (None: none)."""
    token = _TIME_LEFT.set(time_left)
    try:
        yield
    finally:
        _TIME_LEFT.reset(token)


def call_ends(default_s: float) -> tuple[float, bool]:
    """(when a remote call started now must end, as `time.monotonic()` reads it; whether that is a deadline's). A
    deadline's end comes a little before it (a tenth of the time left, at most DEADLINE_MARGIN_S, as the grants'
    host calls give up), so that the guest still runs to act on the error."""
    now = time.monotonic()
    reader = _TIME_LEFT.get()
    left = reader() if reader is not None else None
    if left is None:
        return now + default_s, False
    return now + max(0.0, left - min(left / 10, DEADLINE_MARGIN_S)), True


def socket_of(response: Any) -> socket.socket | None:
    """The socket an httpx response is read from (None when the transport does not say)."""
    stream = getattr(response, "extensions", {}).get("network_stream")
    try:
        sock = stream.get_extra_info("socket") if stream is not None else None
    except Exception:  # noqa: BLE001 - a transport without it: the per-read timeout is all there is
        return None
    return sock if isinstance(sock, socket.socket) else None


def shut(sock: socket.socket | None) -> None:
    """Shut `sock` down for reading and writing: a `recv` blocked on it in another thread returns at once (closing
    it alone does not wake that thread)."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class Alarm:
    """One armed bound: `action` runs on the watchdog's thread at `ends` unless disarmed first."""

    def __init__(self, ends: float, action: Callable[[], None]) -> None:
        self.ends = ends
        self.action = action
        self.fired = False

    def disarm(self) -> None:
        _WATCHDOG.disarm(self)


class _Watchdog:
    """One daemon thread for every remote call's bound: it sleeps until the earliest alarm (a handful are armed at
    once: one per request in flight)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._alarms: set[Alarm] = set()
        self._thread: threading.Thread | None = None

    def arm(self, ends: float, action: Callable[[], None]) -> Alarm:
        alarm = Alarm(ends, action)
        with self._cond:
            self._alarms.add(alarm)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="llmhost-remote-bounds", daemon=True)
                self._thread.start()
            self._cond.notify()
        return alarm

    def disarm(self, alarm: Alarm) -> None:
        with self._cond:
            self._alarms.discard(alarm)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [a for a in self._alarms if a.ends <= now]
                for alarm in due:
                    self._alarms.discard(alarm)
                    alarm.fired = True
                if not due:
                    soonest = min((a.ends for a in self._alarms), default=now + 60.0)
                    self._cond.wait(soonest - now)
                    continue
            for alarm in due:
                with contextlib.suppress(Exception):  # the call it bounds reports the timeout itself
                    alarm.action()


_WATCHDOG = _Watchdog()


def arm(ends: float, action: Callable[[], None]) -> Alarm:
    """Run `action` at `ends` (from the watchdog's thread) unless the returned alarm is disarmed first."""
    return _WATCHDOG.arm(ends, action)


class BodyTooLarge(Exception):
    """A body read whole passed its cap."""


class TimeUp(Exception):
    """A body read whole did not end by its call's end."""


def _read(response: Any, ends: float, cap: int, whole: bool) -> bytes:
    """Up to `cap` bytes of a streamed httpx response's body, by `ends` (a watchdog shuts its socket then, waking a
    read that waits); closed either way. `whole`: the body must end within both bounds (`TimeUp`, `BodyTooLarge`
    otherwise), else what came is returned."""
    sock = socket_of(response)
    alarm = arm(ends, lambda: shut(sock))
    parts: list[bytes] = []
    size = 0
    try:
        for part in response.iter_raw():
            size += len(part)
            parts.append(part)
            if size > cap or time.monotonic() > ends:
                if not whole:
                    break
                raise BodyTooLarge if size > cap else TimeUp
    except (BodyTooLarge, TimeUp):
        raise
    except Exception:
        if whole:  # a cut or shut connection: past the end it is the time bound's doing
            if alarm.fired or time.monotonic() > ends:
                raise TimeUp from None
            raise
    finally:
        alarm.disarm()
        with contextlib.suppress(Exception):
            response.close()
    if whole and alarm.fired:
        raise TimeUp
    return b"".join(parts)[:cap]


def read_capped(response: Any, ends: float, cap: int) -> bytes:
    """The whole body of an httpx response opened with `stream`, read by `ends` and within `cap` bytes: `TimeUp` or
    `BodyTooLarge` otherwise (the response is closed either way)."""
    return _read(response, ends, cap, whole=True)


def read_head(response: Any, ends: float, cap: int) -> bytes:
    """At most `cap` bytes of a body, read by `ends`: what an error message may quote of it (never raises)."""
    return _read(response, ends, cap, whole=False)
