"""A text-pretrained backbone (`backbone_name_or_path`, the Pythia-70M recipes) that cannot be fetched ends in one line
naming the checkpoint and how to provide it, not in transformers' "Check your internet connection"."""

import os
import subprocess
import sys

import pytest

from spt_hf.modeling.configuration_backbone import backbone_checkpoint

PYTHIA = "EleutherAI/pythia-70m-deduped"


@pytest.mark.parametrize("recipe", [f"listops/pythia70m-pretrained-{phase}.yaml" for phase in ("spt", "finetune")])
def test_a_pretrained_backbone_recipe_offline_fails_in_one_line_naming_the_checkpoint(tmp_path, recipe):
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),  # an empty Hugging Face cache
        "SPT_HF_CACHE": str(tmp_path / "cache"),
        "SPT_HF_DEBUG": "",
    }
    command = "spt" if recipe.endswith("-spt.yaml") else "finetune"
    data = "{num_train: 12, num_val: 4, num_test: 4}"
    cmd = [sys.executable, "-m", "spt_hf", command, "--config", recipe, "--generate_data", data]
    result = subprocess.run(
        [*cmd, "--output_dir", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()[-2:]  # (before them: the data generation's progress bars)
    assert lines[1].startswith("(--debug") and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert f"`backbone_name_or_path: {PYTHIA}` cannot be loaded: HF_HUB_OFFLINE=1" in lines[0]
    assert "Hugging Face cache" in lines[0] and "local folder" in lines[0] and "--backbone_name_or_path DIR" in lines[0]
    assert "internet connection" not in result.stderr


def test_the_checkpoint_error_keeps_a_local_folders_own_message(tmp_path):
    transformers_message = "We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your internet..."
    expected = r"`backbone_name_or_path: someone/missing` cannot be loaded"
    with pytest.raises(FileNotFoundError, match=expected) as info, backbone_checkpoint("someone/missing"):
        raise OSError(transformers_message)
    assert "\n" not in str(info.value) and "hf download someone/missing --local-dir DIR" in str(info.value)
    missing_file = "does not appear to have a file named config.json"
    with pytest.raises(OSError, match=missing_file), backbone_checkpoint(str(tmp_path)):  # the folder exists
        raise OSError(f"{tmp_path} {missing_file}.")
