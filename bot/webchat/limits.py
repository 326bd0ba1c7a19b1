"""How much one socket may send: frame size and frame rate (a token bucket)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: A text frame longer than this (in UTF-8 bytes) closes the socket with 1009.
MAX_FRAME_BYTES = 512 * 1024


__all__ = ["FrameRate", "SocketLimits"]


@dataclass(frozen=True, slots=True)
class SocketLimits:
    max_frame_bytes: int = MAX_FRAME_BYTES
    #: Frames a socket may send per second on average, and in one burst.
    frames_per_second: float = 10.0
    burst: int = 30
    #: Refused frames in a row after which the socket is closed (1008).
    max_refused: int = 200
    #: Sockets open at once, all conversations together; one more is refused (HTTP 403).
    max_sockets: int = 1000
    #: How often a socket's sign-in is checked while it only listens (each frame it sends
    #: is checked before it acts): an ended sign-in's socket is closed (1008).
    signin_check_s: float = 30.0


class FrameRate:
    """A token bucket: ``burst`` frames at once, then ``per_second``."""

    def __init__(self, per_second: float, burst: int, clock: Callable[[], float]) -> None:
        self._rate = per_second
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()

    def allow(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
