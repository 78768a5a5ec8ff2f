"""Interrupting the suite's processes: the tests send SIGINT to commands, and compare sends it to its phases."""

import contextlib
import signal


def interruptible() -> None:
    """Give this process Python's own SIGINT handler back if it started with SIGINT ignored, as every command does
    that a non-interactive shell starts in the background (`make test &`, `nohup ... &`): an ignored signal stays
    ignored in every child, so the tests' SIGINT, and compare's SIGINT to its phases, would reach no one and the
    interrupt tests would hang until their bounds."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def sigint_ignored():
    """Within it, this process ignores SIGINT, and so does every process it starts: as a command starts that a script
    runs in the background (`spt-hf compare ... &`)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
