"""A quick end-to-end check of the model framework: every head trains a few steps, saves, reloads identically.

This is the interim main job (README); the SPT-vs-scratch comparison replaces it once the pipeline exists.
"""

import tempfile
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification

from .checkpoints import verify_backbone_transfer


def make_batch(generator: torch.Generator, batch: int = 16, length: int = 32, vocab: int = 16) -> dict:
    """Sequences over ids 4..vocab-1 whose label is the majority id parity; random right padding."""
    ids = torch.randint(4, vocab, (batch, length), generator=generator)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
    mask = (torch.arange(length) < lengths[:, None]).long()
    ids = ids.masked_fill(mask == 0, 0)
    labels = ((ids % 2 == 1) & (mask == 1)).sum(1).mul(2).gt(lengths).long()
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def train(model, step_batch, steps: int = 20) -> tuple[float, float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = last = 0.0
    model.train()
    for step in range(steps):
        loss = model(**step_batch(step)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        first = loss.item() if step == 0 else first
        last = loss.item()
    return first, last


def fmt(losses: tuple[float, float]) -> str:
    return f"{losses[0]:.3f} -> {losses[1]:.3f}"


def run_demo(model_type: str = "spt_rotary_transformer", steps: int = 20) -> None:
    generator = torch.Generator().manual_seed(0)
    config = AutoConfig.for_model(
        model_type, vocab_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_labels=2
    )
    with tempfile.TemporaryDirectory() as workdir:
        start = time.perf_counter()

        def masked(step):
            batch = make_batch(generator)
            selected = (torch.rand(batch["input_ids"].shape, generator=generator) < 0.25) & batch[
                "attention_mask"
            ].bool()
            labels = torch.where(selected, batch["input_ids"], -100)
            return {**batch, "input_ids": batch["input_ids"].masked_fill(selected, 1), "labels": labels}

        mlm = AutoModelForMaskedLM.from_config(config)
        print(f"[masked LM]      loss {fmt(train(mlm, masked, steps))}")
        mlm.save_pretrained(f"{workdir}/spt")
        classifier = AutoModelForSequenceClassification.from_pretrained(f"{workdir}/spt", num_labels=2)
        checked = verify_backbone_transfer(classifier, f"{workdir}/spt")
        print(f"[transfer]       {checked} backbone tensors equal the SPT checkpoint")
        print(f"[classification] loss {fmt(train(classifier, lambda s: make_batch(generator), steps))}")
        config.bidirectional = False
        causal = AutoModelForCausalLM.from_config(config)

        def causal_batch(step):
            batch = make_batch(generator)
            return {**batch, "labels": batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)}

        print(f"[causal LM]      loss {fmt(train(causal, causal_batch, steps))}")
        for name, model, auto in (
            ("classification", classifier, AutoModelForSequenceClassification),
            ("causal LM", causal, AutoModelForCausalLM),
        ):
            model.eval().save_pretrained(f"{workdir}/{name}")
            reloaded = auto.from_pretrained(f"{workdir}/{name}").eval()
            batch = {k: v for k, v in make_batch(generator).items() if k != "labels"}
            with torch.no_grad():
                same = torch.equal(model(**batch).logits, reloaded(**batch).logits)
            print(f"[save/load]      {name}: reloaded outputs identical: {same}")
        prompt = make_batch(generator, batch=1, length=5)["input_ids"]
        print(f"[generate]       {causal.generate(prompt, max_new_tokens=8, do_sample=False).tolist()[0]}")
        print(f"done in {time.perf_counter() - start:.1f} s")
