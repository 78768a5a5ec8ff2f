"""The estimate of a phase's cost: measured steps, their scaling in batch and length, the verdict and the CLI."""

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch
import yaml
from helpers import TINY_CONFIGS, TINY_IDS, save_pretrained_backbone
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import Trainer

from spt_hf.cli import main
from spt_hf.cost.compute import count_step_flops, phase_compute
from spt_hf.cost.flops import flop_counter
from spt_hf.cost.measure import (
    PRODUCTS,
    SHAPES_ONLY_FROM,
    ProductShapesOnly,
    count_step,
    fit_length,
    measure_step,
    synthetic_examples,
)
from spt_hf.data import (
    CausalSPTCollator,
    ClassificationCollator,
    MaskedSPTCollator,
    RetrievalCollator,
    generate_data,
    get_task_spec,
    load_task,
)
from spt_hf.modeling.cauchy import paired_cauchy
from spt_hf.modeling.ssm import fft_conv
from spt_hf.recipes.loading import load_recipe
from spt_hf.training.estimate import (
    GIB,
    PhaseEstimate,
    counted,
    data_length,
    estimate_phase,
    estimate_task,
    expected_longest,
    mean_batch,
    significant,
    train_examples,
)
from spt_hf.training.pipeline import phase_collator, phase_model

TINY = {
    "spt_rotary_transformer": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2},
    "spt_s4": {"hidden_size": 32, "num_hidden_layers": 2, "state_size": 16, "kernel": "diag"},
    "spt_mega": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "intermediate_size": 64,
        "shared_representation_size": 16,
        "ema_projection_size": 8,
        "nffn_hidden_size": 64,
        "chunk_size": None,  # full attention: activations quadratic in the length
    },
}


def tiny_recipe(tmp_path, model_type: str, phase: str = "spt", **values):
    values = {
        "task": "listops",
        "max_length": 1024,
        "model_type": model_type,
        **TINY.get(model_type, {}),
        "per_device_train_batch_size": 8,
        "max_steps": 10,
        "output_dir": str(tmp_path / "run"),
        **values,
    }
    values = {key: value for key, value in values.items() if value is not None}
    if phase == "spt":
        values.setdefault("objective", "masked")
    path = tmp_path / f"tiny-{phase}.yaml"
    path.write_text(yaml.safe_dump(values))
    return load_recipe(path, phase=phase)


def built(recipe, phase: str):
    task = estimate_task(recipe)
    model, _ = phase_model(recipe, phase, task)
    return model, phase_collator(recipe, phase, task.spec, exact_lengths=True), task.spec


def measured(recipe, phase: str, length: int):
    model, collator, spec = built(recipe, phase)
    return measure_step(model, collator, spec, length, device="cpu")


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_extrapolation_in_length_matches_a_full_length_step(tmp_path, model_type):
    """b + a·L + c·L² through the steps at 128, 256 and 512 predicts the step at 1024: the per-position (linear)
    costs, the full-attention (quadratic) ones and those sized by the model's maximum length (constant)."""
    recipe = tiny_recipe(tmp_path, model_type)
    *shorter, full = (measured(recipe, "spt", length) for length in (128, 256, 512, 1024))
    high = shorter[-1]
    predicted = fit_length(shorter, 1024)
    assert predicted.extrapolated_from == (128, 256, 512)
    assert predicted.flops == pytest.approx(full.flops, rel=0.05)
    # within the tolerance the estimate promises for memory
    assert predicted.activation_bytes == pytest.approx(full.activation_bytes, rel=0.25)
    if model_type == "spt_mega":  # the materialised L x L attention: four times the bytes at twice the length
        total = full.activation_bytes + full.fixed_activation_bytes
        assert total > 3 * (high.activation_bytes + high.fixed_activation_bytes)


def test_saved_activations_are_the_same_for_the_same_step(tmp_path):
    """S4's forward pass frees some tensors it saved (a dropped part of the graph) and reuses their addresses: counted
    by address alone, the same step gave different totals after other steps (794,916, 825,636 and 792,868 bytes)."""
    recipe = tiny_recipe(tmp_path, "spt_s4")
    model, collator, spec = built(recipe, "spt")
    shapes = [(128, 1), (512, 3), (128, 1), (1024, 3), (128, 1)]  # other steps between the same ones
    counts = [count_step(model, collator, spec, length, batch, torch.device("cpu"))[1] for length, batch in shapes]
    assert counts[0] == counts[2] == counts[4], counts


def test_products_are_not_computed_but_shaped():
    with ProductShapesOnly():
        product = torch.ones(2, 3) @ torch.ones(3, 4).t().contiguous().t()
        spectrum = torch.fft.rfft(torch.ones(8, 5), n=16)
        plain = torch.ones(2) + 1  # element-wise work on a small tensor runs
    assert product.shape == (2, 4) and not product.any()
    assert spectrum.shape == (8, 9) and spectrum.dtype == torch.complex64 and not spectrum.any()
    assert plain.tolist() == [2.0, 2.0]


class KernelsRun(TorchDispatchMode):
    """Records the operations that reach a kernel with data (any input off the meta device)."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(t.device.type != "meta" for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)):
            self.names.add(func._schema.name)  # without the overload: `aten::bmm` for `bmm.out` too
        return func(*args, **kwargs)


def test_custom_operators_count_under_shapes_only_without_computing_a_product():
    """spt_hf's custom operators (the Cauchy kernel, the FFT convolution; forward and backward) are counted by running
    their implementation again (cost/flops.py). Under `ProductShapesOnly` that count equals a computed step's, and
    neither the operators nor their re-runs compute a product or transform: the re-runs take meta tensors."""
    hidden, pairs, half, length, batch = 4, 2, 8, 64, 2
    torch.manual_seed(0)
    coef = torch.randn(hidden, 2 * pairs, half, requires_grad=True)
    mu = torch.complex(-torch.rand(hidden, half), torch.randn(hidden, half)).requires_grad_()
    u, kernel = torch.randn(batch, length, hidden, requires_grad=True), torch.randn(2, hidden, length)
    skip = torch.randn(hidden, requires_grad=True)

    def step():
        planes = [re.sum() + im.sum() for re, im in paired_cauchy(coef, mu, 2 * length)]
        (sum(planes) + fft_conv(u, kernel.requires_grad_(), skip).sum()).backward()

    with flop_counter() as computed:
        step()
    with KernelsRun() as ran, ProductShapesOnly(min_elements=0), flop_counter() as shaped:
        step()
    counts = shaped.get_flop_counts()["Global"]
    assert counts[torch.ops.spt_hf_v1.paired_cauchy_backward] > 0 and counts[torch.ops.spt_hf_v1.fft_conv] > 0
    assert shaped.get_flop_counts() == computed.get_flop_counts()
    assert not ran.names & PRODUCTS, ran.names


def test_floating_point_work_on_large_tensors_is_shaped_and_decisions_are_computed():
    large = torch.ones(64, 128)
    with ProductShapesOnly(min_elements=large.numel()):
        scaled = large.t() * 3  # a floating result from a large tensor: zeros of the computed one's shape and strides
        total = large.sum(-1)
        view = large.t()  # a view stays a view
        large.add_(1)  # in place: computed
        positive = large > 0  # a boolean result is computed
        ids = torch.arange(large.numel()).view(64, 128) + 1  # and an integer one
        drawn = torch.rand_like(large)  # a random draw is drawn
        small = torch.ones(4) * 3
    computed = large.t() * 3
    assert scaled.shape == computed.shape and scaled.stride() == computed.stride() and not scaled.any()
    assert total.shape == (64,) and not total.any()
    assert view.data_ptr() == large.data_ptr() and (large == 2).all()
    assert positive.all() and ids[-1, -1] == large.numel() and drawn.std() > 0.1
    assert small.tolist() == [3.0] * 4


@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_a_step_without_its_products_computed_counts_what_a_computed_step_counts(tmp_path, entry):
    """`ProductShapesOnly` gives the products' shapes without computing them: FLOPs and saved bytes equal a computed
    step's, for the SPT and the classification model of every architecture (padding and masks stay real), both at
    the default size from which floating-point work is shaped too (none of it here at this size) and with every
    floating-point operation shaped (`shapes_only_from=0`)."""
    _, model_type, kwargs = entry
    values = {"max_length": 64, "hidden_size": 32, "num_hidden_layers": 2, **kwargs}
    for phase in ("spt", "finetune"):
        model, collator, spec = built(tiny_recipe(tmp_path, model_type, phase, **values), phase)
        computed = count_step(model, collator, spec, 16, 2, torch.device("cpu"), compute=True)
        for shapes_only_from in (SHAPES_ONLY_FROM, 0):
            shapes_only = count_step(model, collator, spec, 16, 2, torch.device("cpu"), False, shapes_only_from)
            assert computed[0] > 0 and shapes_only[:2] == computed[:2], (phase, shapes_only_from)


def test_the_long_s4_kernel_counts_without_its_products_computed(tmp_path, monkeypatch):
    """S4's blocked-powers kernel (long kernels) solves (I - Ā^L)ᵀ Cᵀ = C̃ᵀ: shaped, not computed, that solve sees a
    zero matrix, so solves are among the products that are shaped without being run."""
    import spt_hf.modeling.modeling_s4 as s4_module

    monkeypatch.setattr(s4_module, "_CAUCHY_MAX_WORK", 0)  # the powers at every length
    recipe = tiny_recipe(tmp_path, "spt_s4", phase="spt", max_length=64, kernel="nplr", state_size=64)
    model, collator, spec = built(recipe, "spt")
    computed = count_step(model, collator, spec, 16, 2, torch.device("cpu"), compute=True)
    for shapes_only_from in (SHAPES_ONLY_FROM, 0):
        shapes_only = count_step(model, collator, spec, 16, 2, torch.device("cpu"), False, shapes_only_from)
        assert computed[0] > 0 and shapes_only[:2] == computed[:2], shapes_only_from


@pytest.mark.parametrize("model_type", ["spt_rotary_transformer", "spt_s4"])
def test_costs_per_example_and_per_batch_predict_a_larger_batch(tmp_path, model_type):
    """Measured at batch 1 and 2, the split into per-example and per-batch costs predicts batch 5."""
    recipe = tiny_recipe(tmp_path, model_type, phase="finetune")
    model, collator, spec = built(recipe, "finetune")
    step = measure_step(model, collator, spec, 512, device="cpu")
    flops, saved, _ = count_step(model, collator, spec, 512, 5, torch.device("cpu"))
    assert step.fixed_flops + 5 * step.flops == pytest.approx(flops, rel=0.02)
    assert step.fixed_activation_bytes + 5 * step.activation_bytes == pytest.approx(saved, rel=0.10)


def test_transformer_flops_match_the_matmul_count(tmp_path):
    """An independent count of a rotary transformer's matrix products (GELU FFN): per layer and position the q, k, v,
    o projections 2·4·d² and the FFN 2·2·d·i; attention 2·2·L·d (scores and values, over all L keys); the
    classifier over the pooled vector is negligible. Backward twice the forward, and for attention 2.5 times (its
    backward recomputes the scores, as torch counts fused attention). CPU attention included."""
    recipe = tiny_recipe(tmp_path, "spt_rotary_transformer", phase="finetune", intermediate_size=64)
    step = measured(recipe, "finetune", 512)
    d, i, length, layers = 32, 64, 512, 2
    dense = layers * length * (2 * 4 * d * d + 2 * 2 * d * i)
    attention = layers * length * 2 * 2 * length * d
    assert step.flops + step.fixed_flops == pytest.approx(3 * dense + 3.5 * attention, rel=0.05)


def test_estimate_scales_to_the_recipe_and_reuses_measurements(tmp_path):
    recipe = tiny_recipe(tmp_path, "spt_s4", per_device_train_batch_size=4, gradient_accumulation_steps=2)
    cache: dict = {}
    first = estimate_phase(recipe, "spt", device="cpu", measured=cache)
    assert first.optimizer_steps == 10 and first.global_batch == 8
    assert first.train_flops == pytest.approx((first.flops_per_batch + 4 * first.flops_per_example) * 2 * 10)
    assert first.tokens == 10 * 8 * 1024
    assert first.state_bytes == 16 * first.parameters
    expected = first.state_bytes + first.activation_bytes_per_batch + 4 * first.activation_bytes_per_example
    assert first.total_bytes == pytest.approx(expected)
    other_seed = dataclasses.replace(recipe, training=dataclasses.replace(recipe.training, seed=7))
    again = estimate_phase(other_seed, "spt", device="cpu", measured=cache)
    assert len(cache) == 1 and again.flops_per_example == first.flops_per_example


def test_flops_count_the_batches_the_trainer_trains_on(tmp_path):
    """25 training examples at batch 32: every step is one batch of 25 (the Trainer's only batch, drop_last off),
    not 32, which counted 28% too many FLOPs; 100 at 32 are 4 batches of 25 on average (32, 32, 32, 4)."""
    recipe = tiny_recipe(tmp_path, "spt_s4", num_train_examples=25, per_device_train_batch_size=32)
    estimate = estimate_phase(recipe, "spt", device="cpu")
    assert estimate.train_examples == 25 and estimate.per_device_batch == 32 and estimate.optimizer_steps == 10
    assert estimate.train_flops == pytest.approx((estimate.flops_per_batch + 25 * estimate.flops_per_example) * 10)
    assert estimate.tokens == 10 * 25 * 1024
    assert (mean_batch(32, 25), mean_batch(32, 100), mean_batch(32, 64), mean_batch(32, None)) == (25, 25, 32, 32)


def test_epochs_become_steps_with_the_task_size(tmp_path):
    recipe = tiny_recipe(tmp_path, "spt_s4", max_steps=None, num_train_epochs=2, per_device_train_batch_size=32)
    estimate = estimate_phase(recipe, "spt", device="cpu")
    assert estimate.train_examples == 96_000 and estimate.optimizer_steps == 2 * 96_000 // 32


@pytest.mark.parametrize(
    "task, validation_from, num_train_examples, train_fraction, generated, expected",
    [
        ("listops", "train", None, None, {}, 96_000),  # the LRA release's own split: nothing carved
        ("text", "train", None, None, {}, 22_500),  # IMDb less the 10% carved for validation
        ("text", "test", None, None, {}, 25_000),  # validation from test: the carved part stays in train
        ("image", "test", None, 0.5, {}, 25_000),
        ("pathx", "train", 1_000, None, {}, 1_000),  # the recipe's own size wins
        ("digits", "train", None, None, {}, None),  # size unknown: steps need max_steps
        ("listops", "train", None, None, {"num_train": 2_000}, 2_000),  # the generated training split
        ("listops", "train", None, 0.5, {"num_train": 2_000}, 1_000),
    ],
)
def test_train_examples_come_from_the_task_spec(
    task, validation_from, num_train_examples, train_fraction, generated, expected
):
    data = SimpleNamespace(
        validation_from=validation_from,
        num_train_examples=num_train_examples,
        train_fraction=train_fraction,
        data_dir=None,
        generate_data=generated,
    )
    assert train_examples(SimpleNamespace(data=data), get_task_spec(task)) == expected


@pytest.mark.parametrize(
    "phase, values, expected",
    [
        ("spt", {"objective": "masked"}, MaskedSPTCollator),
        ("spt", {"objective": "causal"}, CausalSPTCollator),
        ("finetune", {}, ClassificationCollator),
        ("scratch", {}, ClassificationCollator),
        ("finetune", {"task": "retrieval"}, RetrievalCollator),
    ],
)
def test_the_estimate_collates_as_the_phase_does(tmp_path, phase, values, expected):
    """`pipeline.phase_collator` decides the collator for the phase and for the estimate's steps."""
    recipe = tiny_recipe(tmp_path, "spt_s4", "spt" if phase == "spt" else "finetune", **values)
    assert type(phase_collator(recipe, phase, estimate_task(recipe).spec)) is expected


@pytest.mark.parametrize(
    "model_type, kernel, operation",
    [
        ("spt_s4", "nplr", "spt_hf_v1.paired_cauchy_backward"),
        ("spt_rotary_transformer", None, "aten._scaled_dot_product_flash_attention_for_cpu"),
    ],
    ids=["s4-fft-cauchy", "transformer-attention"],
)
def test_the_estimate_counts_what_a_trained_phase_records(tmp_path, model_type, kernel, operation):
    """One definition of FLOPs (cost/flops.py): the FLOPs per step a phase records (`phase_compute`, on its first
    batch) equal the estimate's of the same batch shape (per batch + per example x batch, x accumulation), FFTs,
    Cauchy kernel and attention included; on the very same batch, the estimate's step (products shaped, not
    computed) counts exactly what `count_step_flops` counts computing it."""
    values = {"max_length": 256, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "kernel": kernel}
    recipe = tiny_recipe(tmp_path, model_type, phase="finetune", **values)
    estimate = estimate_phase(recipe, "finetune", device="cpu")
    model, collator, spec = built(recipe, "finetune")
    examples = synthetic_examples(spec, spec.max_length, 4)
    trainer = Trainer(model, recipe.training, collator, train_dataset=examples, eval_dataset=examples)
    recorded = phase_compute(trainer)
    assert recorded["flops_by_operation"][operation] > 0
    if model_type == "spt_s4":
        assert recorded["flops_by_operation"]["spt_hf_v1.fft_conv"] > 0
    per_step = (estimate.flops_per_batch + 4 * estimate.flops_per_example) * 2
    assert recorded["flops_per_step"] == pytest.approx(per_step, rel=1e-12)
    batch = collator(examples)
    flops, _ = count_step_flops(model, lambda m: m(**batch).loss)
    assert count_step(model, collator, spec, spec.max_length, 4, torch.device("cpu"))[0] == flops


def verdict_of(activation_gib: float, batch: int, accumulation: int, memory_gb: float = 80.0) -> PhaseEstimate:
    return PhaseEstimate(
        recipe="r",
        phase="spt",
        task="pathx",
        model_type="spt_s4",
        parameters=1_000_000,
        length=16384,
        per_device_batch=batch,
        accumulation=accumulation,
        optimizer_steps=1,
        tokens=1,
        flops_per_example=1.0,
        train_flops=1.0,
        activation_bytes_per_example=activation_gib * GIB,
        state_bytes=0,
        device="cpu",
        device_memory_gb=memory_gb,
    )


def test_verdict_keeps_the_global_batch():
    assert verdict_of(1.0, 32, 1).fits
    unfit = verdict_of(7.0, 32, 1)
    assert not unfit.fits and unfit.fitting_batch() == (8, 4)  # 8 x 7 GiB fits 80 GB, 16 x 7 does not
    assert "per_device_train_batch_size 8 x gradient_accumulation_steps 4 keeps the global batch 32" in unfit.verdict()
    assert verdict_of(100.0, 4, 1).fitting_batch() is None
    assert "even at batch 1" in verdict_of(100.0, 4, 1).verdict()


def test_cli_estimate_and_dry_run(tmp_path, capsys):
    recipe = tiny_recipe(tmp_path, "spt_s4")
    assert main(["estimate", "--config", recipe.source, "--device-memory-gb", "40"]) == 0
    out = capsys.readouterr().out
    assert "measured on cpu" in out and "A100 GPU-hours" in out and "| spt |" in out and "of 40 GiB" in out
    assert " GB" not in out and "0.0 " not in out and "Total: 1 phase," in out
    assert main(["spt", "--config", recipe.source, "--dry-run", "--max-measure-length", "512"]) == 0
    out = capsys.readouterr().out
    assert "extrapolated from 128, 256, 512" in out and "1 phase, of listops (1024): spt_s4." in out
    assert "Lengths: listops at 1024, the recipe's max_length." in out
    assert not (tmp_path / "run").exists()  # nothing trained, nothing written


def test_compare_dry_run_estimates_the_plan_once_per_model(tmp_path, capsys, monkeypatch):
    from spt_hf.training import estimate

    calls = []
    original = estimate.measure_phase
    monkeypatch.setattr(estimate, "measure_phase", lambda *a, **k: calls.append(a[1]) or original(*a, **k))
    argv = ["compare", "--tasks", "digits", "--architectures", "s4", "--seeds", "0", "1", "--recipes_dir", "cpu"]
    assert main([*argv, "--output_dir", str(tmp_path / "runs"), "--dry_run", "--estimate"]) == 0
    out, err = capsys.readouterr()
    assert "(1 model)" in err and "(2 models)" in err
    assert "Total: 6 phases" in out and "A100 GPU-hours" in out and "Largest phase:" in out
    assert sorted(calls) == ["finetune", "spt"]  # two seeds, finetune and scratch: one measurement per model
    assert not (tmp_path / "runs" / "digits").exists()
    assert main([*argv, "--output_dir", str(tmp_path / "runs"), "--estimate"]) == 1  # only with --dry_run
    assert "--estimate goes with --dry_run" in capsys.readouterr().err


def test_a_task_read_through_a_backbone_tokenizer_is_estimated_at_its_longest(tmp_path):
    """`backbone_input: tokenizer` (the pythia70m-pretrained recipes): without the data, the inputs are at most the
    task's length times the most tokens one symbol takes, in the tokenizer's vocabulary."""
    from transformers import AutoTokenizer

    from spt_hf.data.retokenize import token_table

    folder = save_pretrained_backbone(tmp_path / "backbone")
    recipe = load_recipe("listops/pythia70m-pretrained-spt.yaml", {"backbone_name_or_path": str(folder)}, phase="spt")
    spec = estimate_task(recipe).spec
    tokenizer = AutoTokenizer.from_pretrained(folder)
    listops = load_recipe("listops/pythia70m-spt.yaml", phase="spt")
    pieces = max(len(ids) for ids in token_table(estimate_task(listops).spec, tokenizer).values())
    assert pieces >= 1 and spec.max_length == 2048 * pieces
    assert spec.input_kind == "tokens" and spec.vocab_size == len(tokenizer)


def test_a_generated_task_is_estimated_at_the_length_a_real_step_has(tmp_path):
    """The CPU ListOps recipe generates trees of at most 120 symbols (the task's maximum is 2,048), which batches
    pad to 128 (a multiple of 64): the estimate's FLOPs per step are within 10 % of the `compute` that a real 2-step
    run of the recipe records."""
    assert main(["spt", "--config", "cpu/listops-s4-spt.yaml", "--max_steps", "2", "--output_dir", str(tmp_path)]) == 0
    recorded = json.loads((tmp_path / "spt" / "results.json").read_text())["compute"]["flops_per_step"]
    estimate = estimate_phase(load_recipe("cpu/listops-s4-spt.yaml", {"max_steps": 2}, phase="spt"), "spt")
    assert estimate.length <= 128 and "generated examples" in estimate.length_source
    assert estimate.train_flops / estimate.optimizer_steps == pytest.approx(recorded, rel=0.1)


@pytest.mark.parametrize(
    "values, length, why",
    [
        ({}, 2048, "the task's maximum (its data is not read; an upper bound where lengths vary)"),
        ({"max_length": 300}, 300, "the recipe's max_length"),
        (
            {"generate_data": {"num_train": 8, "num_val": 1, "num_test": 1, "min_length": 5, "max_length": 30}},
            64,  # batches padded to a multiple of 64
            "generated",
        ),
        ({"max_length": 20, "generate_data": {"num_train": 8, "num_val": 1, "num_test": 1}}, 20, "generated"),
    ],
)
def test_the_measured_length_is_the_datas(tmp_path, values, length, why):
    recipe = tiny_recipe(tmp_path, "spt_s4", **{"max_length": None, **values})
    measured_length, reason = data_length(recipe, estimate_task(recipe).spec)
    assert why in reason and (measured_length == length if why != "generated" else 2 < measured_length <= length)


def test_a_task_on_disk_is_measured_at_its_cached_lengths(tmp_path, monkeypatch):
    """Once `load_task` has cached a `data_dir` task, its training examples' lengths are cheap to read: the estimate
    takes them; before, it reads no data and takes the task's maximum."""
    monkeypatch.setenv("SPT_HF_CACHE", str(tmp_path / "cache"))
    data_dir = generate_data("listops", tmp_path / "data", 40, 8, 8, min_length=5, max_length=30)
    recipe = tiny_recipe(tmp_path, "spt_s4", max_length=None, data_dir=str(data_dir), pad_to_multiple_of=1)
    spec = estimate_task(recipe).spec
    assert data_length(recipe, spec)[0] == 2048
    load_task("listops", data_dir)
    length, why = data_length(recipe, spec)
    assert "training examples in the task's cache" in why and 5 < length <= 30


def test_generated_lengths_are_those_the_generators_write():
    from spt_hf.data.generators import generated_lengths

    trees = generated_lengths("listops", 64, min_length=5, max_length=30, max_depth=4)
    assert len(trees) == 64 and all(5 < n < 30 for n in trees)
    assert generated_lengths("pathfinder", 2, resolution=16, workers=1) == [256, 256]
    with pytest.raises(ValueError, match="Unknown listops generator option"):
        generated_lengths("listops", 1, resolution=16)


@pytest.mark.parametrize("lengths, batch, expected", [([1, 2, 3], 1, 2.0), ([1, 2, 3], 2, 8 / 3), ([1, 2, 3], 5, 3.0)])
def test_expected_longest_of_a_batch(lengths, batch, expected):
    assert expected_longest(lengths, batch) == pytest.approx(expected)


@pytest.mark.parametrize(
    "value, text", [(0.0, "0"), (0.004, "< 0.01"), (0.0163, "0.0163"), (2.5, "2.5"), (80.0, "80"), (1234.5, "1,234")]
)
def test_numbers_keep_significant_digits(value, text):
    assert significant(value) == text


def test_counts_are_singular_for_one():
    assert (counted(1, "phase"), counted(2, "phase"), counted(0, "phase")) == ("1 phase", "2 phases", "0 phases")
