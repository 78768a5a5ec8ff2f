"""The suite's processes can be interrupted however the suite was started (tests/conftest.py, tests/interrupts.py)."""

import signal
import subprocess
import sys

from interrupts import interruptible

SHOW = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def test_a_suite_started_with_sigint_ignored_gives_its_children_sigint_back():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a non-interactive shell starts
    try:
        ignored = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, check=True)
        assert ignored.stdout.strip() == "False"  # what the interrupt tests' processes inherited before
        interruptible()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        child = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, check=True)
        assert child.stdout.strip() == "True"
    finally:
        signal.signal(signal.SIGINT, previous)


def test_this_suite_runs_with_sigint_handled():
    child = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "True"
