"""What a compare plan will cost, before anything runs: the estimate of each of its phases (`training/estimate.py`),
each distinct model and length measured once (`spt-hf compare --dry_run --estimate`)."""

import dataclasses
import sys
import time

from ..training.estimate import counted, estimate_phase


def estimate_jobs(jobs, device_memory_gb: float = 80.0, max_measure_length: int | None = None):
    """Estimates of a compare plan's phases (`compare.PhaseJob`s), each distinct model and length measured once
    (seeds and training sizes reuse it); phases that cannot be estimated come back with the reason."""
    measured: dict = {}
    estimates, skipped = [], {}
    for job in jobs:
        start, known = time.perf_counter(), len(measured)
        try:
            estimate = estimate_phase(
                job.load_recipe(), job.phase, device_memory_gb, max_measure_length, measured=measured
            )
        except ValueError as error:
            skipped[job.id] = str(error)
            continue
        if len(measured) > known:  # a model not measured before: say so, the measurements take a while on a CPU
            seconds, models = time.perf_counter() - start, counted(len(measured), "model")
            print(f"estimate: measured {job.id} in {seconds:.0f} s ({models})", file=sys.stderr)
        estimates.append(dataclasses.replace(estimate, recipe=f"{job.id}"))
    return estimates, skipped
