"""The trial `spt-hf compare --tune` chooses for the seeded phases: among trials of equal value, the lowest-numbered,
whatever the study's storage answers for `best_trial` (Optuna's RDB storage leaves ties to the database, and MySQL
may return any of them: tests/cluster/test_slurm_tune.py met it on MariaDB)."""

import pytest

from spt_hf.compare.tune import Search, best_trial, chosen_values

optuna = pytest.importorskip("optuna")


class AnyTieStudy:
    """A study whose `best_trial` returns the last of the tied trials, as a MySQL server may."""

    def __init__(self, study):
        self.study = study

    def get_trials(self, **kwargs):
        return self.study.get_trials(**kwargs)

    @property
    def best_trial(self):
        top = max(t.value for t in self.study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
        return [t for t in self.study.trials if t.value == top][-1]


def study_of(values: list[float | None]) -> AnyTieStudy:
    study = optuna.create_study(direction="maximize")
    distribution = optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    for number, value in enumerate(values):
        state = optuna.trial.TrialState.FAIL if value is None else optuna.trial.TrialState.COMPLETE
        trial = optuna.trial.create_trial(
            params={"learning_rate": 1e-3 * (number + 1)},
            distributions={"learning_rate": distribution},
            value=value,
            state=state,
        )
        study.add_trial(trial)
    return AnyTieStudy(study)


def search(study) -> Search:
    return Search("digits/dlr/scratch", "scratch", template=None, spt_job=None, space={}, budget={}, study=study)


def test_a_tie_goes_to_the_lowest_numbered_trial_whatever_the_storage_answers():
    study = study_of([0.1, 0.3, None, 0.3, 0.2])
    assert study.best_trial.number == 3  # what MySQL may answer
    assert best_trial(study).number == 1
    assert chosen_values([search(study)]) == {"digits/dlr/scratch": {"learning_rate": pytest.approx(2e-3)}}


def test_a_study_without_a_completed_trial_keeps_the_recipes_values(capsys):
    study = study_of([None, None])
    assert best_trial(study) is None
    assert chosen_values([search(study)]) == {}
    assert "no trial completed" in capsys.readouterr().out
