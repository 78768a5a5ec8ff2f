"""A finetuned checkpoint on raw inputs: `pipeline("text-classification")` in a process without spt_hf gives the
model's predictions on the task's own encoding and the evaluation's accuracy; continuous series through
`pipeline("audio-classification")` and `classify_series`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, pipeline
from without_spt_hf import run_without_spt_hf

from spt_hf.data.readers.lra import listops_example
from spt_hf.data.vocab import EOS_ID
from spt_hf.training import load_recipe
from spt_hf.training.pipeline import run
from spt_hf.training.task_data import generated_data_dir

TINY = {
    "model_type": "spt_rotary_transformer",
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 64,
    "learning_rate": 3e-3,
    "max_steps": 4,
    "save_strategy": "steps",
    "save_steps": 4,
    "eval_strategy": "steps",
    "eval_steps": 4,
    "seed": 0,
}
GENERATE = {"num_train": 48, "num_val": 16, "num_test": 24, "min_length": 8, "max_length": 60, "max_depth": 3}
LISTOPS = {"task": "listops", "generate_data": GENERATE, "max_length": 24}  # some rows are truncated


def train_tiny(tmp_path: Path, data: dict) -> Path:
    """SPT then finetuning of a tiny model on `data`; returns the run folder."""
    for name, extra in (("spt", {"objective": "masked"}), ("finetune", {})):
        values = {**data, **TINY, **extra, "output_dir": str(tmp_path / "run")}
        (tmp_path / f"{name}.yaml").write_text(json.dumps(values))
    run(load_recipe(tmp_path / "spt.yaml"), load_recipe(tmp_path / "finetune.yaml"))
    return tmp_path / "run"


def test_text_classification_pipeline_on_raw_listops_without_spt_hf(tmp_path):
    root = train_tiny(tmp_path, LISTOPS)
    for phase in ("spt", "finetune"):
        assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in (root / phase).iterdir()}
    assert (root / "finetune" / "checkpoint-4" / "tokenizer.json").is_file()
    lines = (generated_data_dir("listops", GENERATE) / "basic_test.tsv").read_text().splitlines()[1:]
    rows = [line.split("\t") for line in lines if line.strip()]
    assert any(len(listops_example(text, "0", 10**6, [], "row")["input_ids"]) > 23 for text, _ in rows)
    model = AutoModelForSequenceClassification.from_pretrained(root / "finetune").eval()
    with torch.no_grad():  # the model on the task's own encoding, one example at a time
        own = [
            int(
                model(
                    input_ids=torch.tensor([listops_example(text, label, 23, [EOS_ID], "row")["input_ids"]])
                ).logits.argmax()
            )
            for text, label in rows
        ]
    code = f"""
import json
from transformers import pipeline
classify = pipeline("text-classification", model={str(root / "finetune")!r}, trust_remote_code=True, truncation=True)
texts = json.loads({json.dumps(json.dumps([text for text, _ in rows]))})
label2id = classify.model.config.label2id
print(json.dumps([label2id[out["label"]] for out in classify(texts)]))
"""
    assert run_without_spt_hf(code, tmp_path) == own
    results = json.loads((root / "finetune" / "results.json").read_text())
    accuracy = np.mean([p == int(label) for p, (_, label) in zip(own, rows, strict=True)])
    assert results["metrics"]["test"]["test_accuracy"] == accuracy


def test_series_classifier_on_raw_values_through_the_pipeline_and_classify_series(tmp_path):
    from sklearn.datasets import load_digits

    from spt_hf.preprocessing import classify_series

    root = train_tiny(tmp_path, {"task": "digits", "task_options": {"input_kind": "continuous"}})
    folder = root / "finetune"
    assert {"preprocessor_config.json", "feature_extraction_series.py"} <= {p.name for p in folder.iterdir()}
    raw = load_digits().data[:6].astype(np.float32)  # (6, 64): the raw intensities 0-16, one channel
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():  # the task's own route: normalised as the collator does ((x - 8) / 8), no padding
        own = model(input_values=torch.from_numpy((raw - 8.0) / 8.0)[..., None]).logits.argmax(-1).tolist()
    names = model.config.id2label
    helper = [out[0]["label"] for out in classify_series(folder, list(raw))]
    assert helper == [names[i] for i in own]
    classify = pipeline("audio-classification", model=str(folder))  # spt_hf registered the Auto classes
    assert [classify(row, top_k=1)[0]["label"] for row in raw] == helper
    code = f"""
import json
import numpy as np
from transformers import AutoFeatureExtractor, AutoModelForSequenceClassification, pipeline
folder = {str(folder)!r}
model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
fe = AutoFeatureExtractor.from_pretrained(folder, trust_remote_code=True)
classify = pipeline("audio-classification", model=model, feature_extractor=fe)
rows = np.asarray(json.loads({json.dumps(json.dumps(raw.tolist()))}), dtype=np.float32)
print(json.dumps([classify(row, top_k=1)[0]["label"] for row in rows]))
"""
    assert run_without_spt_hf(code, tmp_path) == helper


def test_retrieval_pairs_one_tokenizer_call_per_document_without_spt_hf(tmp_path):
    from transformers import AutoConfig

    from spt_hf import AutoModelForRetrieval
    from spt_hf.data import get_task_spec
    from spt_hf.data.readers.lra import aan_example
    from spt_hf.preprocessing import save_preprocessing

    spec = get_task_spec("retrieval", max_length=16)
    config = AutoConfig.for_model(
        "spt_s4", hidden_size=16, num_hidden_layers=1, state_size=8, **spec.model_config_kwargs()
    )
    torch.manual_seed(0)
    model = AutoModelForRetrieval.from_config(config).eval()
    model.save_pretrained(tmp_path / "retrieval")
    save_preprocessing(spec, tmp_path / "retrieval")
    pair = ("Ünïcode document one, long enough to be truncated.", "a second document")
    own = aan_example("1", *pair, 16, [], "pair")
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([own["input_ids"]]), input_ids_2=torch.tensor([own["input_ids_2"]]))
    code = f"""
import json
import torch
from transformers import AutoTokenizer
from transformers.dynamic_module_utils import get_class_from_dynamic_module
folder = {str(tmp_path / "retrieval")!r}
head = json.load(open(folder + "/config.json"))["auto_map"]["AutoModelForRetrieval"]
head = get_class_from_dynamic_module(head, folder, trust_remote_code=True)
model = head.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)  # a model folder: its config is remote code
first = tokenizer([{pair[0]!r}], truncation=True, padding=True, return_tensors="pt")
second = tokenizer([{pair[1]!r}], truncation=True, padding=True, return_tensors="pt")
with torch.no_grad():
    logits = model(input_ids=first.input_ids, attention_mask=first.attention_mask,
                   input_ids_2=second.input_ids, attention_mask_2=second.attention_mask).logits
print(json.dumps(logits.tolist()))
"""
    torch.testing.assert_close(torch.tensor(run_without_spt_hf(code, tmp_path)), expected.logits)
