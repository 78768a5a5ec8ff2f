"""The suite's processes can be interrupted however the suite was started (tests/conftest.py, tests/interrupts.py)."""

import signal
import subprocess
import sys

from interrupts import interruptible, sigint_ignored

SHOW = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def test_a_suite_started_with_sigint_ignored_gives_its_children_sigint_back():
    with sigint_ignored():  # as a background job of a non-interactive shell starts
        ignored = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, check=True)
        assert ignored.stdout.strip() == "False"  # what the interrupt tests' processes inherited before
        interruptible()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        child = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, check=True)
        assert child.stdout.strip() == "True"


def test_this_suite_runs_with_sigint_handled():
    child = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "True"
