"""The phases of a run, in one place: their names, the `spt-hf` command that runs each, which of them finetune, their
step budgets, and what each starts from.

A run has three phases, each with one name used by the CLI, the recipe file, the run sub-folder and results.json
(the table in docs/recipes.md):

- "spt" (`spt-hf spt`, alias `spt-hf pretrain`; `<arch>-spt.yaml`; `spt/`): self-pretraining on the task's train split;
- "finetune" (`spt-hf finetune --model_name_or_path ...`; `<arch>-finetune.yaml`; `finetune/`): finetuning from a
  checkpoint, the SPT phase's in a run;
- "scratch" (`spt-hf finetune` without a checkpoint; the same finetuning recipe; `scratch/`): the baseline, finetuning
  without an SPT checkpoint. It starts from random initialisation, or from text-pretrained weights that the recipe's
  `backbone_name_or_path` loads; the folder keeps its first name so that every saved run folder is still found.

What a phase starts from is one vocabulary, `StartKind`, for results.json's `init.kind`, compare's plan and the report.
Standard library only: hub/, training/, compare/ and the CLI all import it.
"""

import contextlib
import math
from enum import StrEnum
from pathlib import Path

SPT_PHASE = "spt"
FINETUNE_PHASE = "finetune"
BASELINE_PHASE = "scratch"
PHASES = (SPT_PHASE, FINETUNE_PHASE, BASELINE_PHASE)  # also the sub-folders of a run folder
FINETUNING_PHASES = (FINETUNE_PHASE, BASELINE_PHASE)  # the phases `spt-hf finetune` runs: both train a classifier
# The `spt-hf` command that runs each phase, and the phase `load_recipe` checks its recipe for.
PHASE_COMMANDS = {SPT_PHASE: "spt", FINETUNE_PHASE: "finetune", BASELINE_PHASE: "finetune"}
RESULTS_FILE = "results.json"  # what each phase records, in its folder (training/results.py writes it)


class StartKind(StrEnum):
    """What a phase's model starts from, one vocabulary for results.json (`init.kind`), compare's plan table and the
    report (its runs' `kind`).

    - SCRATCH: random initialisation.
    - TEXT_PRETRAINED: pretrained weights that are not an SPT checkpoint: the backbone weights the recipe's
      `backbone_name_or_path` loads, or a checkpoint without the SPT data fingerprint (a Hub model).
    - SPT: an SPT checkpoint (its folder holds the SPT data fingerprint).
    """

    SCRATCH = "scratch"
    TEXT_PRETRAINED = "text-pretrained"
    SPT = "spt"


BASELINE_KINDS = (StartKind.SCRATCH, StartKind.TEXT_PRETRAINED)  # what the baseline phase can start from
# results.json files written before `StartKind` recorded a checkpoint without the SPT fingerprint as "pretrained".
PRETRAINED_BEFORE_START_KIND = "pretrained"


def finetuning_phase(from_checkpoint: bool) -> str:
    """The phase `spt-hf finetune` runs: "finetune" from a checkpoint (`model_name_or_path`), else the baseline."""
    return FINETUNE_PHASE if from_checkpoint else BASELINE_PHASE


def start_kind(model_config: dict, spt_checkpoint: bool | None = None) -> StartKind:
    """What a phase starts from. From a checkpoint (`model_name_or_path`), `spt_checkpoint` says whether it is an SPT
    checkpoint; without one (None), the recipe's `model_config` decides: text-pretrained when it loads pretrained
    backbone weights (`backbone_name_or_path`), else scratch. One decision for the pipeline, compare's plan and the
    report."""
    if spt_checkpoint is not None:
        return StartKind.SPT if spt_checkpoint else StartKind.TEXT_PRETRAINED
    return StartKind.TEXT_PRETRAINED if model_config.get("backbone_name_or_path") else StartKind.SCRATCH


def recorded_start_kind(results: dict) -> StartKind:
    """What the finetuning phase of a results.json started from, files written before `StartKind` included: their
    baseline phase recorded "scratch" even when its recipe loaded text-pretrained weights (its recipe decides, as it
    did when it ran), and a finetuning phase from a checkpoint without the SPT fingerprint recorded "pretrained"."""
    if results["phase"] != FINETUNE_PHASE:
        return start_kind((results.get("recipe") or {}).get("model_config") or {})
    recorded = (results.get("init") or {}).get("kind")
    return start_kind({}, spt_checkpoint=recorded not in (PRETRAINED_BEFORE_START_KIND, StartKind.TEXT_PRETRAINED))


def phase_budgets(
    spt_max_steps: int | None, finetune_max_steps: int | None, total_steps: int | None, spt_fraction: float
) -> dict[str, int | None]:
    """The steps of each phase: each recipe's own `max_steps` (the baseline gets the finetuning recipe's), or for
    compute-tied runs `total_steps` split by `spt_fraction` (at least one SPT step; the baseline gets all of it)."""
    if total_steps is None:
        return {SPT_PHASE: spt_max_steps, FINETUNE_PHASE: finetune_max_steps, BASELINE_PHASE: finetune_max_steps}
    spt_steps = max(1, math.floor(total_steps * spt_fraction))
    return {SPT_PHASE: spt_steps, FINETUNE_PHASE: total_steps - spt_steps, BASELINE_PHASE: total_steps}


def refuse_ignored_max_steps(total_steps: int | None, overrides: dict, source: str | None = None) -> None:
    """Refuse a --max_steps override of a recipe pair whose budgets are tied (`total_steps`, from the SPT recipe at
    `source`): total_steps decides every phase's steps, so it would be ignored."""
    if total_steps and "max_steps" in overrides:
        name = Path(source).name if source else "the SPT recipe"
        raise ValueError(
            f"--max_steps {overrides['max_steps']} would be ignored: {name} ties the phases' budgets with "
            f"total_steps={total_steps} (SPT gets spt_fraction of it, finetuning the rest, the baseline all of it). "
            "Pass --total_steps N, or --total_steps null (`spt-hf compare`: --budget equal) to give each phase "
            "--max_steps."
        )


# A launcher sets this in a phase's environment; the phase's own `spt-hf` process then asks the kernel for SIGTERM
# when its parent dies (a killed Ray worker or submitit task), so that no orphaned phase keeps its folder's lock. The
# phase does it itself: a `preexec_fn` would run Python between fork and exec in the launcher's threaded process,
# which can crash the child.
END_WITH_PARENT = "SPT_HF_END_WITH_PARENT"


def end_with_parent() -> None:
    """In a phase process started by a launcher (``END_WITH_PARENT`` set): answer SIGINT, the launcher's way of
    stopping it, even when started with SIGINT ignored (a compare started in the background of a script passes that
    on); on Linux, receive SIGTERM when the parent dies, and stop at once if it already has (the process was handed
    to init before the request took effect)."""
    import os
    import signal
    import sys

    if os.environ.pop(END_WITH_PARENT, None) != "1":
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    if os.getppid() == 1:
        raise SystemExit("spt-hf: the process that started this phase has ended; not starting the phase.")


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `kill` sends) within `sigterm_interrupts`: the command stops as on Ctrl-C, and exits 143."""


@contextlib.contextmanager
def sigterm_interrupts():
    """Within it, SIGTERM raises `Terminated` in the main thread, so that a command stopped with `kill` (the only
    signal that reaches a command started in the background of a script, which ignores SIGINT) stops what it runs
    and says how to resume, as on Ctrl-C, instead of ending at once. Outside the main thread it does nothing."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_INTERRUPTS: list[int] = []  # the SIGINTs received within `interrupts_latched`


@contextlib.contextmanager
def interrupts_latched():
    """Within it, a Ctrl-C (SIGINT) is not lost. Python raises KeyboardInterrupt wherever the main thread is, and one
    raised while a finalizer runs (a `__del__`, a weakref callback, a generator closed by the garbage collector) is
    printed as "Exception ignored" and dropped: the command would go on to its end as if never interrupted. Here
    SIGINT is recorded as well as raised; `raise_if_interrupted` raises it again at the next safe point (a training
    step's end), and leaving the block raises it if nothing did. A process that ignores SIGINT (or handles it its
    own way) keeps doing so; outside the main thread it does nothing."""
    import signal
    import threading

    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return

    def latch(signum, frame):
        _INTERRUPTS.append(signum)
        raise KeyboardInterrupt

    _INTERRUPTS.clear()
    previous = signal.signal(signal.SIGINT, latch)
    try:
        yield
        raise_if_interrupted()  # (one dropped after the last safe point)
    finally:
        signal.signal(signal.SIGINT, previous)
        _INTERRUPTS.clear()


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if a SIGINT arrived within `interrupts_latched` (its own KeyboardInterrupt may have
    been dropped, see there)."""
    if _INTERRUPTS:
        raise KeyboardInterrupt
