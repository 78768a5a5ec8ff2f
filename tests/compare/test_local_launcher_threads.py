"""The local launcher's thread settings per phase: OMP_NUM_THREADS shares the cores, and OMP_WAIT_POLICY=PASSIVE makes
idle OpenMP threads sleep (spinning ones made a phase's steps ~14x slower when other work shared the cores,
benchmarks/bench_threads.py); either variable set by the user wins."""

import os
from types import SimpleNamespace

import pytest

from spt_hf.compare import launchers


@pytest.mark.parametrize("user", [{}, {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "3"}])
def test_phases_get_shared_cores_and_sleeping_openmp_threads_unless_the_user_set_them(user, monkeypatch, tmp_path):
    for name in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in user.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(launchers, "_gpu_ids", lambda: [])
    seen = []
    monkeypatch.setattr(launchers, "execute_phase", lambda command, log, env, **kwargs: seen.append(env) or 0)
    monkeypatch.setattr(launchers, "phase_finished", lambda job, world_size: True)
    job = SimpleNamespace(id="a", depends_on=None, words=["spt"], log=tmp_path / "a.log")
    launchers.run_local([job], lambda *args: None, parallel=1)
    (env,) = seen
    if user:
        assert "OMP_WAIT_POLICY" not in env and "OMP_NUM_THREADS" not in env  # the environment's values reach it
    else:
        assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["OMP_NUM_THREADS"] == str(max(1, os.cpu_count() or 1))
