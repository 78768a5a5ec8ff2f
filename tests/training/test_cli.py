"""The `spt-hf` command answers a user's mistake in one message saying what is wrong and how to fix it (no
traceback unless --debug or SPT_HF_DEBUG=1), and shows the traceback of internal errors."""

import json

import pytest

from spt_hf.cli import main as cli_main

TINY = {
    "task": "digits",
    "model_type": "spt_rotary_transformer",
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "max_steps": 2,
}


@pytest.fixture()
def recipes(tmp_path):
    spt = tmp_path / "tiny-spt.yaml"
    spt.write_text(json.dumps({**TINY, "objective": "masked", "output_dir": str(tmp_path / "run")}))
    finetune = tmp_path / "tiny-finetune.yaml"
    finetune.write_text(json.dumps({**TINY, "output_dir": str(tmp_path / "run")}))
    broken = tmp_path / "broken-spt.yaml"
    broken.write_text("task: digits\nmodel_type: [spt_s4\nhidden_size: 16\n")
    return tmp_path, spt, finetune, broken


MISTAKES = {
    "missing recipe": (["spt", "--config", "nowhere.yaml"], "Recipe nowhere.yaml not found"),
    "yaml syntax": (["spt", "--config", "{broken}"], r"broken-spt.yaml:\d+:\d+: YAML syntax error"),
    "unknown key": (["spt", "--config", "{spt}", "--hiden_size", "8"], "Did you mean: hiden_size -> hidden_size"),
    "negative max_steps": (["spt", "--config", "{spt}", "--max_steps", "-5"], "`max_steps` must be a positive"),
    "wrong phase": (["finetune", "--config", "{spt}"], "is a self-pretraining recipe .*run it with `spt-hf spt`"),
    "typo in a checkpoint path": (
        ["finetune", "--config", "{finetune}", "--model_name_or_path", "runs/typo/spt"],
        "runs/typo/spt does not exist",
    ),
    "report of a missing folder": (["report", "{root}/runs/nothing"], "No such run folder"),
    "max_steps over tied budgets": (
        ["run", "--config", "{spt}", "--total_steps", "10", "--max_steps", "4"],
        r"--max_steps 4 would be ignored: tiny-spt.yaml ties .* total_steps=10",
    ),
    "bad generator size": (
        ["generate-data", "listops", "--out", "{root}/lo", "--num-train", "0", "--num-val", "1", "--num-test", "1"],
        "must each be at least 1",
    ),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_mistake_is_one_clear_line_without_traceback(mistake, recipes, capsys, monkeypatch):
    monkeypatch.delenv("SPT_HF_DEBUG", raising=False)
    root, spt, finetune, broken = recipes
    argv, message = MISTAKES[mistake]
    argv = [a.format(root=root, spt=spt, finetune=finetune, broken=broken) for a in argv]
    assert cli_main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    first = err.strip().splitlines()[0]
    assert first.startswith(f"spt-hf {argv[0]}: error: ")
    import re

    assert re.search(message, err), err
    with pytest.raises(Exception, match=message):
        cli_main([*argv, "--debug"])


def test_internal_errors_keep_their_traceback(recipes, monkeypatch):
    root, spt, *_ = recipes
    import spt_hf.training.pipeline as pipeline

    def broken(recipe):
        return {}["not a user error"]  # a bug: a failed lookup, not a diagnosed mistake

    monkeypatch.setattr(pipeline, "pretrain", broken)
    with pytest.raises(KeyError):
        cli_main(["spt", "--config", str(spt)])


def test_help_starts_with_the_usage_and_groups_the_keys(capsys):
    assert cli_main(["pretrain", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: spt-hf spt --config RECIPE.yaml [--key value ...]")
    positions = [out.index(f"\n{group}") for group in ("recipe:", "data:", "model:", "SPT objective", "training (")]
    assert positions == sorted(positions)
    assert "--mask_rate" in out and "--learning_rate" in out
