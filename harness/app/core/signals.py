"""Signals as interrupts: SIGTERM and SIGHUP clean up as Ctrl-C does, and are reported as themselves.

Every command stops its engines and keeps what it measured on Ctrl-C (``KeyboardInterrupt``).
A supervisor's SIGTERM (systemd, Kubernetes, ``timeout``) or a closed terminal's SIGHUP takes the
same path: the handler raises :class:`Terminated`, a ``KeyboardInterrupt`` subclass, so every
``except KeyboardInterrupt`` clean-up runs unchanged, while messages and the exit status name
the signal (128 + its number, the shell's convention: 143 for SIGTERM; 130 for Ctrl-C).
"""

from __future__ import annotations

import signal
from typing import Any

CTRL_C = "the user (Ctrl-C)"


class Terminated(KeyboardInterrupt):
    """Raised by the handler for ``signum`` (SIGTERM or SIGHUP)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def install_handlers() -> None:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (call from it once)."""

    def handler(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, handler)


def interrupt_cause(exc: BaseException) -> str:
    """Who interrupted, for a sentence after "interrupted by": ``"SIGTERM"`` or ``"the user (Ctrl-C)"``."""
    return signal.Signals(exc.signum).name if isinstance(exc, Terminated) else CTRL_C


def exit_code(cause: str) -> int:
    """The exit status for an interrupt ``cause`` (:func:`interrupt_cause`): 128 + the signal number."""
    try:
        return 128 + int(signal.Signals[cause])
    except KeyError:
        return 128 + int(signal.SIGINT)
