"""transformers' own common-model and generation tests (`ModelTesterMixin`, `GenerationTesterMixin`) run on spt_hf's
architectures, the way transformers runs them on its own models: one ModelTester per architecture, built from the tiny
configs of tests/helpers.py.

transformers' test files are not part of spt_hf (nor of the transformers wheel). Point `SPT_HF_TRANSFORMERS_TESTS` at a
folder holding transformers' `tests/` of the installed version: `make test-transformers` (and CI) extracts it from the
pinned source distribution on PyPI, which ships `tests/test_modeling_common.py` but not `tests/generation/` nor
`tests/exporters/`; the common-model tests then run and the generation and export tests do not (one skip says so). A
git checkout runs them all:

    git clone --depth 1 --branch v5.24.0 https://github.com/huggingface/transformers /tmp/hf-tests
    SPT_HF_TRANSFORMERS_TESTS=/tmp/hf-tests python -m pytest -m slow tests/models/test_transformers_suite.py

Without it the suite is skipped; the testers themselves are checked by the default suite. The tests that do not apply
to spt_hf, and why, are listed in docs/transformers_tests.md; they are declared below the way transformers' own model
test files declare theirs (class flags and `_check_*` overrides, no blanket skip list).
"""

import inspect
import os
import sys
import types
import unittest
from pathlib import Path
from unittest import mock

import pytest
import torch
from helpers import TINY_CONFIGS, make_config
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from spt_hf.auto import AutoModelForRetrieval
from spt_hf.modeling.cache import SequenceCache

ROOT = os.environ.get("SPT_HF_TRANSFORMERS_TESTS")
ENTRIES = {entry[0]: entry for entry in TINY_CONFIGS}
ARCHITECTURES = ("transformer-rotary", "s4-nplr", "dlr")  # the paper's three; any TINY_CONFIGS id works


def model_classes(entry) -> tuple[type, ...]:
    """The classes of every head but retrieval (which takes two documents: its own tester)."""
    config = make_config(entry)
    autos = (AutoModel, AutoModelForMaskedLM, AutoModelForCausalLM, AutoModelForSequenceClassification)
    return tuple(auto._model_mapping[type(config)] for auto in autos)


class SPTModelTester:
    """transformers' ModelTester protocol for one TINY_CONFIGS entry: a tiny config and its common inputs."""

    batch_size, seq_length, is_training = 3, 7, True
    vocab_size, hidden_size, num_hidden_layers, num_labels = 99, 32, 2, 3

    def __init__(self, parent, entry, retrieval: bool = False, **overrides):
        self.parent, self.entry, self.retrieval, self.overrides = parent, entry, retrieval, overrides
        self.num_attention_heads = entry[2].get("num_attention_heads", 1)
        if retrieval:
            self.num_hidden_states_types = 2  # a retrieval output carries both documents' hidden states

    def get_config(self):
        values = {"vocab_size": self.vocab_size, "hidden_size": self.hidden_size, "num_labels": self.num_labels}
        values |= {"num_hidden_layers": self.num_hidden_layers, "pad_token_id": 0, "bos_token_id": 1}
        values |= {"eos_token_id": 2, "hidden_dropout_prob": 0.0, "bidirectional": False, **self.overrides}
        return make_config(self.entry, "tokens", **values)

    def prepare_config_and_inputs_for_common(self):
        generator = torch.Generator().manual_seed(0)
        shape = (self.batch_size, self.seq_length)
        input_ids = torch.randint(3, self.vocab_size, shape, generator=generator)
        attention_mask = torch.ones(shape, dtype=torch.long)
        # padded rows (spt_hf pads on the right), as the random masks of transformers' testers have: the padding-free
        # tests compare a padded batch with the same sequences packed, and skip when nothing is padded
        attention_mask[0, -2:] = 0
        attention_mask[1, -1:] = 0
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.retrieval:
            inputs |= {"input_ids_2": input_ids.flip(1), "attention_mask_2": attention_mask}
        return self.get_config(), inputs

    def prepare_config_and_inputs(self):
        return self.prepare_config_and_inputs_for_common()


def recurrent(entry) -> bool:
    return entry[1] in ("spt_s4", "spt_dlr", "spt_mega", "spt_spade", "spt_performer")


def check_sequence_cache(test, batch_size, cache, seq_length, config):
    """What transformers' stateful models' test files check of their cache (Mamba's conv/recurrent states): one
    layer per hidden layer, each state batch first, of the generation's batch, whatever the length."""
    test.assertIsInstance(cache, SequenceCache)
    test.assertEqual(len(cache.layers), config.num_hidden_layers)
    test.assertEqual(cache.get_seq_length(), seq_length)
    for layer in cache.layers:
        test.assertEqual(layer.batch_size, batch_size)


def check_sequence_caches_equal(test, cache1, cache2):
    """transformers' `_check_caches_are_equal` compares keys and values and asks models with another cache to
    override it: two SequenceCaches hold the same length and, block by block, the same recurrent state tensors."""
    test.assertIsInstance(cache1, SequenceCache)
    test.assertIsInstance(cache2, SequenceCache)
    test.assertEqual(cache1.get_seq_length(), cache2.get_seq_length())
    test.assertEqual(len(cache1.layers), len(cache2.layers))
    for layer1, layer2 in zip(cache1.layers, cache2.layers):
        test.assertEqual(len(layer1.states), len(layer2.states))
        for state1, state2 in zip(layer1.states, layer2.states):
            test.assertEqual(type(state1), type(state2))
            for tensor1, tensor2 in zip(*(() if s is None else s.tensors for s in (state1, state2)), strict=True):
                torch.testing.assert_close(tensor1, tensor2)


def make_test_case(mixins, entry, retrieval: bool):
    """A unittest class of transformers' mixins for one architecture (and head set)."""
    stateful = recurrent(entry)
    classes = (AutoModelForRetrieval._model_mapping[type(make_config(entry))],) if retrieval else model_classes(entry)

    class Case(*mixins, unittest.TestCase):
        all_model_classes = classes
        # without transformers' generation tests (a source release) no class is declared generative: their tester
        # does not inherit GenerationTesterMixin, as transformers asks of models whose generate is not tested
        all_generative_model_classes = tuple(c for c in classes if c.can_generate()) if len(mixins) > 1 else ()
        pipeline_model_mapping = {}
        # no attention probabilities in S4/DLR; generation through spt_hf's SequenceCache (not a DynamicCache)
        has_attentions = not stateful
        is_encoder_decoder = False
        # transformers dates a model by the copyright line of its config file (spt_hf's have none: "before 2023")
        # and checks the initialisation of missing weights only for newer models or those that set this flag
        test_can_init_all_missing_weights_before_2023 = True

        def setUp(self):
            self.model_tester = SPTModelTester(self, entry, retrieval=retrieval)

        def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
            # transformers adds labels by looking the class up in its own static auto tables, where registered
            # models do not appear: the labels of each head, as its loss takes them
            inputs = super()._prepare_for_class(inputs_dict, model_class, return_labels=False)
            if return_labels and not model_class.__name__.endswith("Model"):
                batch, length = inputs["input_ids"].shape
                per_position = model_class.__name__.endswith(("ForCausalLM", "ForMaskedLM"))
                shape = (batch, length) if per_position else (batch,)
                inputs["labels"] = torch.zeros(shape, dtype=torch.long, device=inputs["input_ids"].device)
            return inputs

        def _without_the_backbone(self, test):
            # the bare backbone has no loss; transformers skips its own bare models by name (MODEL_MAPPING_NAMES)
            heads = tuple(c for c in classes if not c.__name__.endswith("Model"))
            self.all_model_classes, saved = heads, self.all_model_classes
            try:
                test()
            finally:
                self.all_model_classes = saved

        def test_training(self):
            self._without_the_backbone(super().test_training)

        def test_training_gradient_checkpointing(self):
            self._without_the_backbone(super().test_training_gradient_checkpointing)

        def test_training_gradient_checkpointing_use_reentrant_false(self):
            self._without_the_backbone(super().test_training_gradient_checkpointing_use_reentrant_false)

        def test_training_gradient_checkpointing_use_reentrant_true(self):
            self._without_the_backbone(super().test_training_gradient_checkpointing_use_reentrant_true)

        def test_causal_lm_loss_honors_shift_labels(self):
            # transformers finds decoder LM heads by name in its static tables, where registered models do not appear:
            # the causal LM head is listed there while the test runs
            causal = {c.config_class.model_type: c.__name__ for c in classes if c.__name__.endswith("ForCausalLM")}
            with mock.patch.dict(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, causal):
                super().test_causal_lm_loss_honors_shift_labels()

        if retrieval:

            @unittest.skip("a document pair: transformers' test shrinks the first document's ids only (see docs)")
            def test_resize_tokens_embeddings(self):
                pass

        if stateful:

            def _check_past_key_values_for_generate(self, batch_size, past_key_values, seq_length, config):
                check_sequence_cache(self, batch_size, past_key_values, seq_length, config)

            def _check_caches_are_equal(self, cache1, cache2):
                check_sequence_caches_equal(self, cache1, cache2)

    if retrieval and not stateful:  # parameterized tests, one method per case (S4/DLR: transformers skips them)
        for name in [n for n in dir(Case) if n.startswith("test_eager_matches_sdpa_inference")]:
            reason = "a document pair: transformers' test builds one document's inputs (see docs)"
            setattr(Case, name, unittest.skip(reason)(lambda self: None))
    run_bare_is_flaky_tests(Case)
    Case.__name__ = Case.__qualname__ = f"Test_{entry[0].replace('-', '_')}{'_retrieval' if retrieval else ''}"
    return Case


def run_bare_is_flaky_tests(case) -> None:
    """Some transformers snapshots decorate a test with `@is_flaky` without its parentheses (5.16's
    `test_prompt_lookup_decoding_matches_greedy_search`): the test becomes `is_flaky`'s inner decorator, which returns
    without running the body, and pytest reports a pass. Put the body back so that it runs (or skips) for real."""
    for name in [n for n in dir(case) if n.startswith("test_")]:
        inner = inspect.unwrap(getattr(case, name))
        if getattr(inner, "__qualname__", "") == "is_flaky.<locals>.decorator" and inner.__closure__:
            cells = dict(zip(inner.__code__.co_freevars, (c.cell_contents for c in inner.__closure__)))
            if inspect.isfunction(cells.get("max_attempts")):  # the test function, taken as `max_attempts`
                setattr(case, name, cells["max_attempts"])


# Modules test_modeling_common.py imports that transformers' source distribution does not ship: (module, its mixin)
SDIST_MISSING = {
    "tests.generation.test_utils": "GenerationTesterMixin",
    "tests.exporters.test_export": "ExportTesterMixin",
}


def has_generation_tests(root: Path) -> bool:
    return (root / "tests" / "generation" / "test_utils.py").exists()


def stand_in_missing_modules(root: Path) -> None:
    """Empty mixins in place of the modules a source distribution lacks: their tests are not collected (a checkout
    has them all). `test_generation_tester_mixin_inheritance` then sees models without generation tests."""
    for module_name, mixin in SDIST_MISSING.items():
        if not (root / (module_name.replace(".", "/") + ".py")).exists():
            module = types.ModuleType(module_name)
            setattr(module, mixin, type(mixin, (), {"__doc__": "stand-in: not in transformers' source release"}))
            sys.modules[module_name] = module


def load_mixins():
    """transformers' ModelTesterMixin, and GenerationTesterMixin where the folder has generation tests, imported from
    the folder as the package `tests`."""
    root = Path(ROOT).expanduser().resolve()
    if not (root / "tests" / "test_modeling_common.py").exists():
        raise FileNotFoundError(f"SPT_HF_TRANSFORMERS_TESTS={ROOT}: no tests/test_modeling_common.py there")
    sys.path.insert(0, str(root))
    stand_in_missing_modules(root)
    from tests.test_modeling_common import ModelTesterMixin  # noqa: PLC0415

    if not has_generation_tests(root):
        return (ModelTesterMixin,)
    from tests.generation.test_utils import GenerationTesterMixin  # noqa: PLC0415

    return ModelTesterMixin, GenerationTesterMixin


if ROOT:  # transformers' tests, collected as unittest classes
    _mixins = load_mixins()
    for _id in ARCHITECTURES:
        for _retrieval in (False, True):
            _case = make_test_case(_mixins if not _retrieval else _mixins[:1], ENTRIES[_id], _retrieval)
            globals()[_case.__name__] = pytest.mark.slow(_case)
    del _case  # collected under its own name only


@pytest.mark.parametrize("entry_id", ARCHITECTURES)
def test_the_testers_build_every_head_and_its_inputs(entry_id):
    """The testers transformers' mixins use: a config every head accepts, inputs each head runs on."""
    entry = ENTRIES[entry_id]
    for retrieval in (False, True):
        tester = SPTModelTester(None, entry, retrieval=retrieval)
        config, inputs = tester.prepare_config_and_inputs_for_common()
        classes = (AutoModelForRetrieval._model_mapping[type(config)],) if retrieval else model_classes(entry)
        for cls in classes:
            model = cls(config).eval()
            with torch.no_grad():
                out = model(**inputs, output_hidden_states=True)
            assert len(out.hidden_states) == tester.num_hidden_layers + 1
    assert model_classes(entry)[2].can_generate()


@pytest.mark.skipif(ROOT is not None, reason="transformers' tests are collected above")
@pytest.mark.slow
def test_transformers_own_tests_need_a_checkout():
    pytest.skip("set SPT_HF_TRANSFORMERS_TESTS (make test-transformers) to run transformers' common-model tests")


@pytest.mark.skipif(
    not ROOT or has_generation_tests(Path(ROOT).expanduser()),
    reason="only for transformers' tests without tests/generation/ (a source release)",
)
@pytest.mark.slow
def test_transformers_generation_tests_need_a_git_checkout():
    pytest.skip("transformers' source release has no tests/generation/: its generation tests need a git checkout")
