"""How many processes run one phase, and the command each machine of a phase runs.

A phase given G devices runs G processes, one per device (data parallelism through `accelerate launch`), never one
process that sees them all: the Trainer would wrap the model in `nn.DataParallel`, and results.json and the recipe
fingerprint would count one process (`PhaseTrainer` refuses that case). The layout comes from the launcher:

- local: one process, or `--accelerate_config FILE` (its `num_processes` and `num_machines`);
- submitit: `nodes` machines × `gpus_per_node` (or `processes_per_node`, or the accelerate config's count) processes;
  one Slurm task per machine runs `accelerate launch` with the machine's rank, the first machine of the job as the
  rendezvous address and a port derived from the job id;
- Ray: `num_gpus` per phase (or `processes`) processes on one machine (a Ray task runs on one node).

The driver knows the world size before anything runs, so a phase finished with that many processes is recognised
(its fingerprint records `world_size`), and a 1-process phase is never taken for a 2-process one.
"""

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..phases import END_WITH_PARENT


@dataclass(frozen=True)
class PhaseProcesses:
    """The processes of one phase: `processes` over `machines` machines, under `accelerate_config` if given."""

    processes: int = 1
    machines: int = 1
    accelerate_config: str | None = None

    def __post_init__(self) -> None:
        if self.processes < 1 or self.machines < 1 or self.processes % self.machines:
            raise ValueError(
                f"A phase on {self.machines} machine(s) needs a positive multiple of {self.machines} processes, "
                f"got {self.processes}."
            )

    @property
    def launched(self) -> bool:
        return self.processes > 1 or self.accelerate_config is not None

    def command(self, words: list[str], machine_rank: int = 0, address: str = "127.0.0.1", port: int | None = None):
        """The command machine `machine_rank` runs for the phase `spt-hf <words>`: `python -m spt_hf` for one
        process, else `accelerate launch` with the world size, the machine's rank and the rendezvous address."""
        if not self.launched:
            return [sys.executable, "-m", "spt_hf", *words]
        launch = [sys.executable, "-m", "accelerate.commands.launch"]
        if self.accelerate_config is not None:
            launch += ["--config_file", self.accelerate_config]
        else:  # data parallel; on a machine without GPUs accelerate runs it on CPU processes (gloo)
            launch += ["--multi_gpu", "--mixed_precision", "no", "--dynamo_backend", "no"]
        launch += ["--num_processes", str(self.processes), "--num_machines", str(self.machines)]
        launch += ["--machine_rank", str(machine_rank), "--main_process_ip", address]
        launch += ["--main_process_port", str(port or free_port())]
        return [*launch, "-m", "spt_hf", *words]


def free_port() -> int:
    """A TCP port free on this machine now (the rendezvous of a 1-machine phase; phases running side by side
    would collide on accelerate's default 29500)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def accelerate_layout(config: str) -> tuple[int, int]:
    """(num_processes, num_machines) of an accelerate config file (1 and 1 when it does not say)."""
    try:
        values = yaml.safe_load(Path(config).read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"`accelerate_config` {config} cannot be read: {error}") from None
    return int(values.get("num_processes") or 1), int(values.get("num_machines") or 1)


def resolve_accelerate_config(config: str | None) -> str | None:
    """A path, or the name of a shipped accelerate config (`accelerate/multi_gpu.yaml`)."""
    if config is None:
        return None
    from ..recipes.loading import find_recipe

    return str(find_recipe(config))


def phase_processes(
    launcher: str, accelerate_config: str | None = None, submitit: dict | None = None, ray: dict | None = None
) -> PhaseProcesses:
    """The processes every phase runs with under `launcher` ("local", "submitit" or "ray"), from its options (the
    comparison's `accelerate_config`, `submitit` and `ray`)."""
    config = resolve_accelerate_config(accelerate_config)
    layout = accelerate_layout(config) if config else (1, 1)
    if launcher == "local":
        if layout[1] > 1:
            raise ValueError(
                f"`accelerate_config` {config} spans {layout[1]} machines; the local launcher runs on this one. "
                "Use --launcher submitit with --submitit_nodes, or a 1-machine config."
            )
        return PhaseProcesses(layout[0], 1, config)
    if launcher == "submitit":
        options = submitit or {}
        machines = int(options.get("nodes", 1))
        per_machine = options.get("processes_per_node") or options.get("gpus_per_node") or layout[0] // layout[1]
        if options.get("cluster", "slurm") != "slurm" and machines > 1:
            raise ValueError(f"`submitit: nodes: {machines}` needs a Slurm cluster; the local cluster has one machine.")
        return PhaseProcesses(int(per_machine) * machines, machines, config)
    ray = ray or {}
    processes = int(ray.get("processes") or max(1, ray.get("num_gpus") or 0) or layout[0])
    if ray.get("num_gpus") and ray["num_gpus"] > 1 and processes != ray["num_gpus"]:
        raise ValueError(f"`ray: num_gpus: {ray['num_gpus']}` runs one process per GPU; `processes` must match.")
    return PhaseProcesses(processes, 1, config)


def job_command(words: list[str], layout: PhaseProcesses) -> tuple[list[str], int]:
    """The command of this machine of a Slurm (or submitit local) job running a phase, and the machine's rank: the
    job's node index; the rendezvous is the job's first node, on a port derived from the job id (the same on every
    machine of the job)."""
    if layout.machines == 1:
        return layout.command(words), 0
    environment = require_package("submitit", "submitit").JobEnvironment()
    job_id = int("".join(c for c in str(environment.job_id).split("_")[0] if c.isdigit()) or 0)
    port = 20000 + job_id % 20000
    return layout.command(words, environment.node, environment.hostnames[0], port), environment.node


def run_in_job(words: list[str], layout: PhaseProcesses, log: str) -> int:
    """What each task of a phase's submitit job runs (one task per machine), logging into `machine_log`."""
    command, rank = job_command(words, layout)
    return execute_phase(command, machine_log(log, rank))


def machine_log(log: str, rank: int) -> str:
    """The log of machine `rank` of a phase: `log` for the first, `<phase>.machine<k>.log` for the others."""
    return str(Path(log).with_suffix(f".machine{rank}.log")) if rank else log


def start_phase(command: list[str], log: str, environment: dict | None = None, note: str = "", **popen):
    """Start one phase's command, its output appended to `log` after its command line (and `note`), with tqdm's
    progress bars off (a log is no terminal); `popen` goes to `subprocess.Popen`. Every launcher starts phases so."""
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TQDM_DISABLE": "1", **(environment or {})}
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(command)}{note}\n")
        handle.flush()
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, **popen)


def execute_phase(
    command: list[str],
    log: str,
    environment: dict | None = None,
    cwd: str | None = None,
    on_start: Callable[[subprocess.Popen], None] | None = None,
) -> int:
    """Run one phase's command, its output into `log`; the exit status. (Also what submitit and Ray run.)
    `on_start` is given the phase's process once it runs, in a process group of its own: the caller forwards
    interrupts to it (the local launcher on Ctrl-C), and a terminal's Ctrl-C reaches the phase once, through it."""
    group = {"process_group": 0} if on_start is not None else {}
    environment = {**(environment or {}), END_WITH_PARENT: "1"}  # the phase ends with this process (phases.py)
    with start_phase(command, log, environment, cwd=cwd, **group) as process:
        if on_start is not None:
            on_start(process)
        try:
            return process.wait()
        except BaseException:  # as subprocess.run: a caller interrupted while it waits leaves no phase running
            process.kill()
            raise


def require_package(module: str, launcher: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f'`--launcher {launcher}` needs the `{module}` package: pip install "spt_hf[cluster]" (pinned versions: '
            'pip install -c constraints.txt "spt_hf[cluster]").'
        ) from None
