"""A Ctrl-C is never lost. Python raises KeyboardInterrupt wherever the main thread is; one raised inside a finalizer
(`__del__`, a weakref callback, a generator closed by the garbage collector) is printed as "Exception ignored" and
dropped. Before `phases.interrupts_latched`, a phase whose Ctrl-C landed there trained on to its last step and exited
0, as a loaded CI machine once showed."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from spt_hf.phases import interrupts_latched, raise_if_interrupted

# A phase whose third step drops a SIGINT: the signal arrives while a finalizer sleeps, as a Ctrl-C can.
DROPPING_PHASE = textwrap.dedent(
    """
    import os, signal, sys, time

    from spt_hf.cli import main
    from spt_hf.training.trainer import PhaseTrainer

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # (the handler runs here, inside the finalizer)

    step = PhaseTrainer.training_step

    def training_step(self, *args, **kwargs):
        if self.state.global_step == 3:
            Finalized()  # (collected at once)
        return step(self, *args, **kwargs)

    PhaseTrainer.training_step = training_step
    sys.exit(main(sys.argv[1:]))
    """
)
PHASE = {
    "max_steps": 400,
    "eval_steps": 2,
    "save_steps": 2,
    "logging_steps": 1,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "per_device_train_batch_size": 8,
}


def test_a_ctrl_c_dropped_in_a_finalizer_still_stops_the_phase_at_the_next_step(tmp_path):
    words = ["spt", "--config", "cpu/digits-dlr-spt.yaml", "--output_dir", "run"]
    words += [f"--{key}={value}" for key, value in PHASE.items()]
    env = {**os.environ, "TQDM_DISABLE": "1", "SPT_HF_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", DROPPING_PHASE, *words], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "Exception ignored" in done.stderr and "KeyboardInterrupt" in done.stderr  # Python did drop it
    assert done.returncode == 130, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "spt-hf spt: interrupted: the phase stopped; the same command resumes from the last checkpoint: "
        f"spt-hf {' '.join(words)}"
    )
    steps = sorted(int(path.name.split("-")[1]) for path in (tmp_path / "run" / "spt").glob("checkpoint-*"))
    assert steps == [2]  # it stopped at the step's end: step 4 would have saved its checkpoint
    assert not (tmp_path / "run" / "spt" / "results.json").exists()
    state = json.loads((tmp_path / "run" / "spt" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2


def test_a_dropped_ctrl_c_stops_the_command_when_its_block_ends():
    # (suppress: the KeyboardInterrupt dropped, as a finalizer drops it)
    with pytest.raises(KeyboardInterrupt), interrupts_latched(), contextlib.suppress(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    raise_if_interrupted()  # the record ends with its block: a later command in this process starts afresh


def test_latching_leaves_an_ignored_sigint_ignored_and_other_threads_alone():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_latched():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)  # (ignored: nothing is raised, now or when the block ends)
    finally:
        signal.signal(signal.SIGINT, previous)
    errors = []

    def in_a_thread():
        try:
            with interrupts_latched():  # (signal.signal would refuse outside the main thread)
                pass
        except Exception as error:  # pragma: no cover - the failure this test reports
            errors.append(error)

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert errors == [] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_compares_local_launcher_stops_at_its_next_wake_after_a_dropped_ctrl_c(tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from spt_hf.compare import launchers
    from spt_hf.compare.plan import PhaseJob

    def job(name, depends_on=None):
        return PhaseJob(name, "spt", "t", "a", "full", 0, Path("r.yaml"), {}, tmp_path / name, "", depends_on)

    monkeypatch.setattr(launchers, "phase_finished", lambda job, world_size: True)
    started = []
    with ThreadPoolExecutor(1) as pool, pytest.raises(KeyboardInterrupt), interrupts_latched():
        with contextlib.suppress(KeyboardInterrupt):  # (dropped, as a finalizer drops it)
            signal.raise_signal(signal.SIGINT)
        launchers.run_graph(
            [job("a/spt"), job("a/ft", "a/spt")],
            lambda j: pool.submit(lambda: started.append(j.id) or 0),
            1,
            lambda j, state, detail: None,
            world_size=1,
        )
    assert started == ["a/spt"]  # the next phase did not start
