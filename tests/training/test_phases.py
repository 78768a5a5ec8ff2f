"""spt_hf.phases: the phases' names, commands, budgets and what each starts from, as tables of cases."""

import ast
import json
import sys
from pathlib import Path

import pytest

import spt_hf.phases
from spt_hf.phases import (
    BASELINE_PHASE,
    FINETUNE_PHASE,
    PHASE_COMMANDS,
    PHASES,
    SPT_PHASE,
    StartKind,
    finetuning_phase,
    phase_budgets,
    recorded_start_kind,
    refuse_ignored_max_steps,
    start_kind,
)

TEXT_BACKBONE = {"backbone_name_or_path": "EleutherAI/pythia-70m-deduped"}


def test_names_folders_and_commands():
    assert PHASES == ("spt", "finetune", "scratch")  # the run sub-folders every saved run folder has
    assert PHASE_COMMANDS == {"spt": "spt", "finetune": "finetune", "scratch": "finetune"}
    assert (finetuning_phase(True), finetuning_phase(False)) == (FINETUNE_PHASE, BASELINE_PHASE)


def test_the_module_is_a_leaf():
    """Standard library only, so that hub/ (below training/) and every layer above can import it."""
    tree = ast.parse(Path(spt_hf.phases.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported and all(name.split(".")[0] in sys.stdlib_module_names for name in imported), imported


@pytest.mark.parametrize(
    ("model_config", "spt_checkpoint", "expected"),
    [
        ({}, None, StartKind.SCRATCH),  # no checkpoint, random initialisation
        ({"backbone_name_or_path": None}, None, StartKind.SCRATCH),
        (TEXT_BACKBONE, None, StartKind.TEXT_PRETRAINED),  # the pythia70m-pretrained baseline and SPT phase
        ({}, True, StartKind.SPT),  # a checkpoint with the SPT data fingerprint
        (TEXT_BACKBONE, True, StartKind.SPT),  # SPT of a text-pretrained model is still an SPT checkpoint
        ({}, False, StartKind.TEXT_PRETRAINED),  # a Hub model without the fingerprint
    ],
)
def test_start_kind(model_config, spt_checkpoint, expected):
    assert start_kind(model_config, spt_checkpoint) == expected


def results(phase: str, init_kind: str | None, model_config: dict | None = None) -> dict:
    """The fields of a results.json that say what its phase started from (`phase_results` + `init`)."""
    recorded = {"phase": phase, "recipe": {"model_config": model_config or {}}}
    if init_kind is not None:
        recorded["init"] = {"kind": init_kind, "model_name_or_path": None}
    return recorded


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        # written before StartKind: a text-pretrained baseline said "scratch", a Hub checkpoint "pretrained"
        (results(BASELINE_PHASE, "scratch"), StartKind.SCRATCH),
        (results(BASELINE_PHASE, "scratch", TEXT_BACKBONE), StartKind.TEXT_PRETRAINED),
        (results(FINETUNE_PHASE, "spt"), StartKind.SPT),
        (results(FINETUNE_PHASE, "pretrained"), StartKind.TEXT_PRETRAINED),
        (results(FINETUNE_PHASE, None), StartKind.SPT),  # no `init`: read as the report always read it
        # written in StartKind's words
        (results(BASELINE_PHASE, "text-pretrained", TEXT_BACKBONE), StartKind.TEXT_PRETRAINED),
        (results(FINETUNE_PHASE, "text-pretrained"), StartKind.TEXT_PRETRAINED),
        (results(SPT_PHASE, None, TEXT_BACKBONE), StartKind.TEXT_PRETRAINED),
    ],
)
def test_recorded_start_kind_reads_old_and_new_results(recorded, expected):
    assert recorded_start_kind(json.loads(json.dumps(recorded))) == expected


def test_a_start_kind_is_written_as_its_name():
    assert json.dumps({"kind": StartKind.TEXT_PRETRAINED}) == '{"kind": "text-pretrained"}'
    assert f"{StartKind.SPT}" == "spt" and StartKind("scratch") is StartKind.SCRATCH


@pytest.mark.parametrize(
    ("spt_max_steps", "finetune_max_steps", "total_steps", "spt_fraction", "expected"),
    [
        (600, 400, None, 0.5, {"spt": 600, "finetune": 400, "scratch": 400}),  # equal: each recipe's own steps
        (None, None, None, 0.5, {"spt": None, "finetune": None, "scratch": None}),  # epochs decide
        (600, 400, 1000, 0.5, {"spt": 500, "finetune": 500, "scratch": 1000}),  # tied: max_steps ignored
        (None, None, 1000, 0.3, {"spt": 300, "finetune": 700, "scratch": 1000}),
        (None, None, 10, 0.01, {"spt": 1, "finetune": 9, "scratch": 10}),  # at least one SPT step
        (None, None, 7, 0.5, {"spt": 3, "finetune": 4, "scratch": 7}),  # SPT's share rounded down
    ],
)
def test_phase_budgets(spt_max_steps, finetune_max_steps, total_steps, spt_fraction, expected):
    assert phase_budgets(spt_max_steps, finetune_max_steps, total_steps, spt_fraction) == expected


@pytest.mark.parametrize(
    ("total_steps", "overrides", "refused"),
    [
        (1000, {"max_steps": 50}, True),
        (1000, {"learning_rate": 1e-3}, False),
        (None, {"max_steps": 50}, False),
        (0, {"max_steps": 50}, False),  # no tie
    ],
)
def test_refuse_ignored_max_steps(total_steps, overrides, refused):
    if not refused:
        refuse_ignored_max_steps(total_steps, overrides, "x/s4-spt.yaml")
        return
    with pytest.raises(ValueError, match=r"^--max_steps 50 would be ignored: s4-spt.yaml ties .* --total_steps N"):
        refuse_ignored_max_steps(total_steps, overrides, "x/s4-spt.yaml")
    with pytest.raises(ValueError, match="ignored: the SPT recipe ties"):
        refuse_ignored_max_steps(total_steps, overrides)
