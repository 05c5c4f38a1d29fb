"""Ctrl-C to a command a test started, as a person gives it, with a bound on the wait."""

from __future__ import annotations

import signal
import subprocess


def interrupt(process: subprocess.Popen, seconds: float) -> tuple[str, str, bool]:
    """SIGINT to ``process``, then its ``(stdout, stderr, stopped)`` once it ended; ``stopped``
    is False where it had not ended ``seconds`` after the signal and was killed."""
    process.send_signal(signal.SIGINT)
    try:
        stdout, stderr = process.communicate(timeout=seconds)
        return stdout, stderr, True
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        return stdout, stderr, False
