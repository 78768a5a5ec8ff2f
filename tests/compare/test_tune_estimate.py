"""`spt-hf compare --tune --dry_run --estimate`: the search's trial phases multiplied out, in the table and its
totals, before anything runs (no study, no folder)."""

import re

import pytest

from spt_hf.cli import main as cli_main

pytest.importorskip("optuna")


def test_the_estimate_of_a_tuned_comparison_multiplies_out_the_trials(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--tasks", "digits", "--architectures", "dlr", "--seeds", "0", "1", "--recipes-dir"]
    args += ["recipes/cpu", "--output-dir", str(out), "--tune", "--tune_trials", "4", "--tune_max_steps", "3"]
    args += ["--total_steps=4", "--hidden_size=16", "--num_hidden_layers=1", "--dry_run", "--estimate"]
    assert cli_main(args) == 0
    text = capsys.readouterr().out
    assert "tune: 2 studies x 4 trials (3 steps each): 8 trial phases before the seeded ones" in text
    rows = {arm: re.search(rf"\| tune/digits/dlr/{arm} \(x4 trials\) \| \w+ \| [^|]+ \| [^|]+ \| (\d+) \|", text)
            for arm in ("spt", "scratch")}  # fmt: skip
    assert all(row and row.group(1) == "12" for row in rows.values())  # 4 trials x 3 steps
    assert "Total: 8 phases" in text  # 2 seeds x (SPT, finetune, scratch) + the 2 searches
    assert not out.exists()  # a dry run writes nothing: no study yet
