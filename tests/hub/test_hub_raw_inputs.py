"""A finetuned checkpoint pushed with `spt-hf push` classifies raw text through `pipeline("text-classification",
model=<repo id>)` in a process without spt_hf, as the model does on the task's own ids; the pushed card names it."""

import json

import torch
from sklearn.datasets import load_digits
from transformers import AutoModelForSequenceClassification

from spt_hf.data.readers import offline

PUSH = """
from spt_hf.cli import main as cli_main
assert cli_main(["push", ARGS["run"], "--phase", "finetune", "--repo-id", "tester/raw-inputs"]) == 0
"""
PIPELINE = """
from huggingface_hub import HfApi, ModelCard
from transformers import pipeline
classify = pipeline("text-classification", model="tester/raw-inputs", trust_remote_code=True, truncation=True)
label2id = classify.model.config.label2id
predictions = [label2id[out["label"]] for out in classify(ARGS["texts"])]
card = ModelCard.load("tester/raw-inputs").text
print("RESULT " + json.dumps({"predictions": predictions, "files": HfApi().list_repo_files("tester/raw-inputs"),
                              "card": card}))
"""


def test_pushed_classifier_on_raw_text_through_the_pipeline_without_spt_hf(tiny_run, hub_client):
    rows = load_digits().data[:12]
    texts = [" ".join(str(int(v)) for v in row) for row in rows]  # the digits task's raw form: 64 levels
    own_ids = [ex["input_ids"] for _, ex in zip(range(12), offline.digits_examples(as_tokens=True)(), strict=False)]
    model = AutoModelForSequenceClassification.from_pretrained(tiny_run / "finetune").eval()
    with torch.no_grad():
        own = model(input_ids=torch.tensor(own_ids)).logits.argmax(-1).tolist()
    hub_client.run(PUSH, {"run": str(tiny_run)})
    process = hub_client.run(PIPELINE, {"texts": texts}, without_spt_hf=True)
    result = json.loads(process.stdout.split("RESULT ", 1)[1])
    assert result["predictions"] == own
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(result["files"])
    data = result["card"][result["card"].index("## Data") :]
    assert "| source | the `digits` task's own data, as spt_hf's loader reads it |" in data
    assert "Raw inputs: the repository carries the task's tokenizer" in data
    assert 'pipeline("text-classification", model="tester/raw-inputs"' in result["card"]
