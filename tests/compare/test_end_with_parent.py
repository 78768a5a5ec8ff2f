"""A phase that a launcher starts ends with the launcher: the phase's own process asks for its parent-death signal
(no Python runs between fork and exec in the launcher's threaded process)."""

import os
import signal
import subprocess
import sys

import pytest
from interrupts import sigint_ignored

from spt_hf.phases import END_WITH_PARENT

CHILD = """
import ctypes, ctypes.util, os, signal
from spt_hf.phases import END_WITH_PARENT, end_with_parent
end_with_parent()
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
sig = ctypes.c_int(-1)
libc.prctl(2, ctypes.byref(sig))  # PR_GET_PDEATHSIG
print(sig.value, END_WITH_PARENT in os.environ, signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("launched", [True, False])
def test_a_launched_phase_asks_for_sigterm_when_its_parent_dies_and_answers_sigint(launched):
    env = {k: v for k, v in os.environ.items() if k != END_WITH_PARENT}
    if launched:
        env[END_WITH_PARENT] = "1"
    with sigint_ignored():  # as a compare run in the background of a script would start it
        done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    signal_number, still_set, answers_sigint = done.stdout.split()
    assert int(signal_number) == (signal.SIGTERM if launched else 0)
    assert still_set == "False"  # not passed on to the phase's own children
    # a launched phase answers its launcher's SIGINT (how compare stops it); a command of the user's keeps its signals
    assert answers_sigint == str(launched)


def test_the_local_launcher_sets_it_for_every_phase(tmp_path):
    from spt_hf.compare.processes import execute_phase

    log = tmp_path / "phase.log"
    code = "import os; print('flag', os.environ.get('" + END_WITH_PARENT + "'))"
    assert execute_phase([sys.executable, "-c", code], str(log)) == 0
    assert "flag 1" in log.read_text()
