"""Whether this process is the `spt-hf` command: the one process where `import spt_hf` does not register the Auto
classes at once (registering imports torch and transformers; `--help` and argument errors must answer without them,
and `cli.main` registers before a command runs)."""

import sys
from pathlib import Path

# How the `spt-hf` command starts: `python -m spt_hf` (also `spt_hf.cli`, `spt_hf.__main__`), or the console script.
COMMAND_MODULES = ("spt_hf", "spt_hf.cli", "spt_hf.__main__")
COMMAND_SCRIPTS = ("spt-hf", "spt-hf.exe")


def started_as_the_command() -> bool:
    """Whether this process is the `spt-hf` command importing its package: the console script (`sys.argv[0]` names
    it), or `python -m spt_hf`, whose package runpy imports while `sys.argv[0]` is still "-m" (`sys.orig_argv` then
    names the module)."""
    if sys.argv[:1] == ["-m"]:
        argv = sys.orig_argv
        return "-m" in argv[:-1] and argv[argv.index("-m") + 1] in COMMAND_MODULES
    return bool(sys.argv) and Path(sys.argv[0]).name in COMMAND_SCRIPTS
