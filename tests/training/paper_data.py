"""Tiny copies of the paper's datasets in their real on-disk formats, every example at the task's full length.

The LRA release's TSVs (ListOps, Retrieval) and Pathfinder image folders (written by spt_hf's generator in the LRA
layout), the Hub repositories' parquet files (IMDb, CIFAR-10, Speech Commands v0.02 with wav bytes) and BIDMC's
`.ts` files. `write_task_data(task, folder)` returns the `data_dir` and the recipe overrides the copy needs.
"""

import csv
import io
import wave
from pathlib import Path

import datasets
import numpy as np
from PIL import Image

from spt_hf.data import generate_data, get_task_spec
from spt_hf.data.readers.hub_datasets import SPEECH_COMMANDS_WORDS

SIZES = {"train": 4, "validation": 2, "test": 2}


def _listops(root: Path) -> None:
    folder = root / "lra_release" / "listops-1000"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("train", "val", "test"):
        with open(folder / f"basic_{name}.tsv", "w", newline="") as f:
            writer = csv.writer(f, delimiter="\t")
            writer.writerow(["Source", "Target"])
            for _ in range(SIZES["validation" if name == "val" else name]):
                digits = rng.integers(0, 10, 2100)  # longer than 2048 tokens: truncated to the task's length
                writer.writerow([f"( [MAX {' '.join(map(str, digits))} ] )", int(digits.max())])


def _retrieval(root: Path) -> None:
    folder = root / "lra_release" / "tsv_data"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("train", "eval", "test"):
        with open(folder / f"new_aan_pairs.{name}.tsv", "w", encoding="utf-8") as f:
            for i in range(SIZES["validation" if name == "eval" else name]):
                texts = ["".join(rng.choice(list("abcdefgh ijklmnop"), 4100)) for _ in range(2)]
                f.write("\t".join([str(i % 2), f"a{i}", f"b{i}", *texts]) + "\n")


def _imdb(root: Path) -> None:
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    (root / "plain_text").mkdir(parents=True)
    for split, n in (("train", 10), ("test", 2), ("unsupervised", 1)):
        texts = [f"{split} review {i} " + "a good film, " * 400 for i in range(n)]  # 5,000+ bytes, each split its own
        labels = [i % 2 for i in range(n)] if split != "unsupervised" else [-1] * n
        ds = datasets.Dataset.from_dict(
            {"text": texts, "label": labels}, features=features if split != "unsupervised" else None
        )
        ds.to_parquet(str(root / "plain_text" / f"{split}-00000-of-00001.parquet"))


def _cifar(root: Path) -> None:
    rng = np.random.default_rng(0)
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)})
    (root / "plain_text").mkdir(parents=True)
    for split in ("train", "test"):
        images = [Image.fromarray(a) for a in rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)]
        ds = datasets.Dataset.from_dict({"img": images, "label": [0, 1, 2, 3]}, features=features)
        ds.to_parquet(str(root / "plain_text" / f"{split}-00000-of-00001.parquet"))


def _wav(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((samples * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def _speech_commands(root: Path) -> None:
    words = list(SPEECH_COMMANDS_WORDS[:4])
    features = datasets.Features(
        {
            "audio": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")},
            "label": datasets.ClassLabel(names=words),
        }
    )
    (root / "v0.02").mkdir(parents=True)
    for index, split in enumerate(("train", "validation", "test")):
        # one second at 16 kHz (the task's full length); each split and word its own clip (finetuning refuses
        # evaluation clips that SPT saw)
        clips = [0.5 * np.sin(np.arange(16000) / (7.0 + index + 3 * k)) for k in range(len(words))]
        rows = {
            "audio": [{"bytes": _wav(c), "path": f"{w}.wav"} for c, w in zip(clips, words)],
            "label": list(range(4)),
        }
        ds = datasets.Dataset.from_dict(rows, features=features).cast_column(
            "audio", datasets.Audio(sampling_rate=16000)
        )
        ds.to_parquet(str(root / "v0.02" / f"{split}-00000-of-00001.parquet"))


BIDMC_HEADER = """@problemName BIDMC32HR
@timeStamps false
@missing false
@univariate false
@dimensions 2
@equalLength true
@seriesLength 4000
@targetLabel true
@data
"""


def _bidmc(root: Path) -> None:
    rng = np.random.default_rng(0)
    folder = root / "BIDMC32HR"
    folder.mkdir(parents=True)
    for split, n in (("TRAIN", 10), ("TEST", 2)):
        series = rng.normal(50.0, 10.0, (n, 2, 4000)).round(2)
        lines = [":".join(",".join(f"{v:g}" for v in dim) for dim in s) + f":{70 + i}" for i, s in enumerate(series)]
        (folder / f"BIDMC32HR_{split}.ts").write_text(BIDMC_HEADER + "\n".join(lines) + "\n")


WRITERS = {
    "listops": _listops,
    "retrieval": _retrieval,
    "text": _imdb,
    "image": _cifar,
    "scifar": _cifar,
    "speech_commands": _speech_commands,
    "bidmc": _bidmc,
}
# the Hub copies of CIFAR-10 carve 5,000 validation images from train: these tiny copies validate on test
OVERRIDES = {"image": {"validation_from": "test"}, "scifar": {"validation_from": "test"}}


def write_task_data(task: str, root: Path) -> tuple[Path, dict]:
    """A tiny copy of `task` under `root` in its real format: (data_dir, recipe overrides)."""
    if task in ("pathfinder", "pathx", "pathx256"):
        generate_data(task, root, SIZES["train"], SIZES["validation"], SIZES["test"], seed=0)
    else:
        WRITERS[task](root)
    assert get_task_spec(task).max_length > 0
    return root, dict(OVERRIDES.get(task, {}))


def write_pythia70m_stand_in(folder: Path, recipe_name: str) -> Path:
    """A stand-in for the Hub checkpoint of a `pythia70m-pretrained` recipe, which a test cannot download: the
    recipe's `backbone_config` (Pythia-70M's published config) with random weights, and a word-level tokenizer that
    gives every symbol of the LRA tasks one token (ListOps' operators and digits, the levels 0-255, the Latin-1
    characters of the byte tasks), as Pythia's tokenizer gives most of them one. Returns the folder."""
    import torch
    import yaml
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModel, PreTrainedTokenizerFast

    from spt_hf.recipes.loading import find_recipe

    backbone = yaml.safe_load(find_recipe(recipe_name).read_text())["backbone_config"]
    words = ["<|endoftext|>", "<|padding|>", "<unk>", "[", "]", "MAX", "MIN", "MED", "SM"]
    words += [str(level) for level in range(256)] + [bytes([byte]).decode("latin-1") for byte in range(256)]
    vocab = {word: index for index, word in enumerate(dict.fromkeys(words))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()  # "[MAX" -> "[", "MAX"
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|padding|>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    AutoModel.from_config(AutoConfig.for_model(**backbone)).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
