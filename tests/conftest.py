"""Suite-wide set-up."""

from interrupts import interruptible


def pytest_configure(config):
    interruptible()  # (before any test starts a process)
