"""Asking Slurm, with its client commands and nothing but the standard library: whether accounting answers, a
partition's time limit, the state of jobs, whether a job is alive, and cancelling jobs.

A leaf below `training/` and `compare/`: the phase folder's lock (`training/run_folder.py`) asks whether the Slurm
job holding it is alive, and compare's Slurm driver (`compare/slurm.py`) watches its jobs here.
"""

import subprocess

# The states of a job that has ended (sacct): it will not run again unless someone requeues it.
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
    "REVOKED",
    "SPECIAL_EXIT",
}
# Reasons for which a pending job will never start.
NEVER_RUNS = {
    "DependencyNeverSatisfied",
    "PartitionTimeLimit",
    "PartitionNodeLimit",
    "PartitionConfig",
    "PartitionDown",
    "PartitionInactive",
    "InvalidQOS",
    "InvalidAccount",
    "BadConstraints",
    "QOSMaxWallDurationPerJobLimit",
    "AssocMaxWallDurationPerJobLimit",
    "ReqNodeNotAvail",
}


class SlurmError(RuntimeError):
    """Slurm refused or cannot do what compare needs; the message is one line with Slurm's reason."""


def _slurm(command: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(
            f"`{command[0]}` is not installed here: `--launcher submitit` with cluster slurm runs where Slurm's "
            "client commands are (or use --submitit_cluster local)."
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(command)}` did not answer within {timeout:.0f} s; is slurmctld up?") from None


def first_error(text: str) -> str:
    """Slurm's reason in a client command's output: its `error:` lines (each once), else its last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    reasons = [line.split("error:", 1)[1].strip() for line in lines if "error:" in line]
    return "; ".join(dict.fromkeys(reasons)) if reasons else (lines[-1] if lines else "no output")


def check_accounting() -> None:
    """One line when sacct does not answer: compare (and submitit) need Slurm's accounting to see how jobs end."""
    done = _slurm(["sacct", "-n", "-X", "-P", "-o", "JobIDRaw", "-j", "1"])
    if done.returncode != 0:
        raise SlurmError(
            f"Slurm accounting does not answer (sacct: {first_error(done.stderr or done.stdout)}): compare needs "
            "it to see how each job ended (set up slurmdbd and AccountingStorageType=accounting_storage/slurmdbd; "
            "see docs/compare.md), or use --submitit_cluster local."
        )


def parse_minutes(text: str) -> float | None:
    """Slurm's time format ([days-]hours:minutes:seconds, minutes:seconds, minutes) in minutes; None = unlimited."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if len(parts) == 1:
        minutes = parts[0]
    elif len(parts) == 2:
        minutes = parts[0] + parts[1] / 60
    else:
        minutes = parts[0] * 60 + parts[1] + parts[2] / 60
    return minutes + (int(days) * 24 * 60 if days else 0)


def partition_limit(partition: str | None) -> tuple[str, float | None]:
    """(the partition's name, its MaxTime in minutes or None) for `partition`, or the default one."""
    done = _slurm(["sinfo", "-h", "-o", "%P|%l"])
    if done.returncode != 0:
        raise SlurmError(f"sinfo failed: {first_error(done.stderr or done.stdout)}")
    limits = {}
    default = None
    for line in done.stdout.split():
        name, _, limit = line.partition("|")
        if name.endswith("*"):
            name = name[:-1]
            default = name
        limits[name] = parse_minutes(limit)
    name = partition or default
    if name is None:
        raise SlurmError("Slurm has no default partition: pass --submitit_partition NAME (`sinfo` lists them).")
    if name not in limits:
        raise SlurmError(
            f"Slurm has no partition {name!r} (partitions: {', '.join(sorted(limits)) or 'none'}): pass "
            "--submitit_partition with one of them."
        )
    return name, limits[name]


def job_states(ids: list[str]) -> dict[str, tuple[str, str, str]]:
    """{job id: (state, reason, exit code)} from squeue (live jobs) and sacct (ended ones)."""
    if not ids:
        return {}
    states = {}
    done = _slurm(["squeue", "-h", "-j", ",".join(ids), "-o", "%i|%T|%r"])
    if done.returncode == 0:
        for line in done.stdout.splitlines():
            fields = line.split("|")
            if len(fields) == 3 and fields[0] in ids:
                states[fields[0]] = (fields[1], fields[2], "")
    rest = [i for i in ids if i not in states or states[i][0] in ENDED]
    if rest:
        done = _slurm(["sacct", "-n", "-X", "-P", "-o", "JobIDRaw,State,Reason,ExitCode", "-j", ",".join(rest)])
        if done.returncode != 0:
            raise SlurmError(f"sacct failed: {first_error(done.stderr or done.stdout)}")
        for line in done.stdout.splitlines():
            fields = line.split("|")
            if len(fields) == 4 and fields[0] in rest:
                states[fields[0]] = (fields[1].split()[0] if fields[1] else "UNKNOWN", fields[2], fields[3])
    return states


def job_alive(job_id: str) -> bool | None:
    """Whether Slurm job `job_id` is queued or running (None: Slurm cannot be asked here)."""
    try:
        state = job_states([str(job_id)]).get(str(job_id))
    except SlurmError:
        return None
    return state is not None and state[0] not in ENDED


def cancel(ids: list[str]) -> None:
    """Cancel the Slurm jobs `ids` (scancel; nothing when there are none)."""
    if ids:
        _slurm(["scancel", *ids])
