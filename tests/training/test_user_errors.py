"""A new user's mistakes with a shipped CPU recipe, run from an empty folder: each ends in one `error:` line naming
the problem and the fix (no traceback), before anything is written, with nothing left behind (docs/reliability.md)."""

import errno
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import transformers

from spt_hf.cli import main as cli_main

SPT = ["spt", "--config", "cpu/digits-s4-spt.yaml", "--max_steps", "2", "--output_dir", "out"]
FINETUNE = ["finetune", "--config", "cpu/digits-s4-finetune.yaml", "--max_steps", "2", "--output_dir", "out"]
COMPARE = ["compare", "--tasks", "digits", "--architectures", "s4", "--recipes_dir", "cpu", "--output_dir", "out"]
TEN_NAMES = "{" + ", ".join(f"{i}: digit{i}" for i in range(10)) + "}"

# (argv, the files the case writes first in the empty folder, the message's pattern)
MISTAKES = {
    "output_dir is a file": (
        [*SPT[:-1], "afile"],
        {"afile": "text"},
        r"output_dir afile: afile is a file, not a folder; choose another --output_dir",
    ),
    "output_dir under a file": (
        [*SPT[:-1], "afile/run"],
        {"afile": "text"},
        r"output_dir afile/run: afile is a file",
    ),
    "negative seed": ([*SPT, "--seed", "-1"], {}, r"`seed` must be an integer from 0 to 4294967295, got -1 \(--seed"),
    "seed above 2**32 - 1": ([*SPT, "--seed", str(2**32)], {}, r"got 4294967296 \(--seed on the command line\)"),
    "negative learning rate": ([*SPT, "--learning_rate", "-1"], {}, r"`learning_rate` must be 0 or more, got -1"),
    "batch size 0": (
        [*SPT, "--per_device_train_batch_size", "0"],
        {},
        r"`per_device_train_batch_size` must be at least 1, got 0",
    ),
    "save_steps not a multiple of eval_steps": (
        [*SPT, "--save_steps", "5", "--eval_steps", "10"],
        {},
        r"save_steps 5 \(--save_steps on the command line\) is not a multiple of eval_steps 10 .*--save_steps 10",
    ),
    "save_steps not a multiple of eval_steps, from compare": (
        [*COMPARE, "--dry_run", "--save_steps", "5", "--eval_steps", "10"],
        {},
        r"save_steps 5 .* is not a multiple of eval_steps 10",
    ),
    "a recipe of binary garbage": (
        ["spt", "--config", "garbage.yaml", "--output_dir", "out"],
        {"garbage.yaml": b"\x00\xbc\xff\xfe binary"},
        r"Recipe garbage.yaml is not a text file .*check the path given to --config",
    ),
    "bad YAML in --task_options": (
        [*SPT, "--task_options", "{input_kind: [tokens"],
        {},
        r"--task_options on the command line: .* is not valid YAML .*quote the whole value",
    ),
    "a key given twice in a recipe": (
        ["spt", "--config", "twice-spt.yaml", "--output_dir", "out"],
        {"twice-spt.yaml": "task: digits\nmodel_type: spt_s4\nlearning_rate: 0.1\nseed: 3\nlearning_rate: 0.2\n"},
        r"Recipe twice-spt.yaml: key `learning_rate` is given twice, on lines 3 and 5",
    ),
    "a key given twice in an override": (
        [*SPT, "--task_options", "{input_kind: tokens, input_kind: values}"],
        {},
        r"--task_options on the command line: .*key `input_kind` is given twice",
    ),
    "an unknown key on the command line": (
        [*SPT, "--lerning_rate", "3"],
        {},
        r"^Unknown recipe key --lerning_rate on the command line; did you mean --learning_rate.*`spt-hf spt --help`",
    ),
    "an unknown key in a recipe": (
        ["spt", "--config", "typo-spt.yaml", "--output_dir", "out"],
        {"typo-spt.yaml": "task: digits\nmodel_type: spt_s4\nlerning_rate: 0.1\n"},
        r"^Unknown recipe key `lerning_rate` in typo-spt.yaml; did you mean `learning_rate`",
    ),
    "a shipped recipe is named, not its path": (
        ["finetune", "--config", "cpu/digits-s4-spt.yaml", "--output_dir", "out"],
        {},
        r"^cpu/digits-s4-spt.yaml is a self-pretraining recipe",
    ),
    "a refusal after the phase folder is opened": (
        [*SPT, "--dataloader_persistent_workers", "true", "--dataloader_num_workers", "1"],
        {},
        r"`dataloader_persistent_workers: true` keeps the first epoch's workers",
    ),
    "id2label that does not name every class": (
        [*FINETUNE, "--id2label", "{0: zero, 1: one}"],
        {},
        r"`id2label` must name each of the 10 classes of 'digits' once, ids 0 to 9",
    ),
    "a report of a folder without results": (
        ["report", "empty", "--output_dir", "out"],
        {"empty/notes.txt": "no results here"},
        r"No results.json of a finished phase under empty: give the --output_dir of a run",
    ),
}


def one_error_line(capsys, command: str) -> str:
    """The message of the one `error:` line that `spt-hf COMMAND` printed (and no traceback)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and errors[0].startswith(f"spt-hf {command}: error: "), err
    return errors[0].split(": error: ", 1)[1]


def folder_state(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_mistake_ends_in_one_line_and_leaves_nothing_behind(mistake, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPT_HF_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    argv, files, message = MISTAKES[mistake]
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        getattr(tmp_path / name, "write_bytes" if isinstance(content, bytes) else "write_text")(content)
    before = folder_state(tmp_path)
    assert cli_main(argv) == 1
    assert re.search(message, one_error_line(capsys, argv[0]))
    assert folder_state(tmp_path) == before  # no output folder, no spt_hf_phase.json


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write into: a read-only bind mount as root (root ignores permissions), else a
    folder without write permission. Skips when root cannot mount."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return folder
    if shutil.which("mount") is None:
        pytest.skip("running as root (which ignores permissions) without `mount` for a read-only bind")
    done = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"running as root (which ignores permissions) and a read-only bind mount failed: {done.stderr}")
    return folder


def test_a_read_only_output_dir_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPT_HF_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    folder = read_only_folder(tmp_path)
    try:
        assert cli_main([*SPT[:-1], str(folder / "out")]) == 1
        message = one_error_line(capsys, "spt")
        assert message.startswith(f"output_dir {folder / 'out'}: {folder} is not writable")
        assert list(folder.iterdir()) == []
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(folder)], check=True)
        else:
            folder.chmod(0o755)


def test_a_full_disk_is_one_line_with_real_sizes(tmp_path, capsys, monkeypatch):
    """The disk fills while the first checkpoint is written: one line with the checkpoint's size (not 0 MiB), the
    free space, and the rerun; the phase saved nothing, so nothing is left behind."""
    monkeypatch.delenv("SPT_HF_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)

    def fill_the_disk(self, output_dir):
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(output_dir) / "optimizer.pt"))

    monkeypatch.setattr(transformers.trainer.Trainer, "_save_optimizer_and_scheduler", fill_the_disk)
    argv = [*SPT, "--save_steps", "1", "--eval_steps", "1"]
    assert cli_main(argv) == 1
    message = one_error_line(capsys, "spt")
    match = re.search(r"writing checkpoint-1 .*needs about (\d+) KiB and [\d.]+ [KMG]iB are free", message)
    assert match and int(match[1]) > 100, message  # the S4D's weights and Adam's two moments: ~620 KiB
    assert message.endswith("run the same command again: it trains from step 0.")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("start", ["scratch", "spt checkpoint"])
def test_id2label_is_saved_with_the_classifier(start, tmp_path, monkeypatch):
    """`--id2label` names the finetuned head's classes in its saved config, from scratch and from an SPT checkpoint
    (whose config has the default names: a head field, not an architecture clash)."""
    monkeypatch.chdir(tmp_path)
    steps = ["--eval_steps", "2", "--save_steps", "2"]
    checkpoint = []
    if start == "spt checkpoint":
        assert cli_main([*SPT, *steps]) == 0
        checkpoint = ["--model_name_or_path", "out/spt"]
    assert cli_main([*FINETUNE, *steps, *checkpoint, "--id2label", TEN_NAMES]) == 0
    phase = "finetune" if checkpoint else "scratch"
    saved = json.loads((tmp_path / "out" / phase / "config.json").read_text())
    assert saved["id2label"] == {str(i): f"digit{i}" for i in range(10)}
