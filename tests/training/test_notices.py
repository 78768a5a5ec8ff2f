"""Notices of the libraries spt_hf drives, shown once a process however often spt_hf builds what prints them."""

import logging

import pytest
import torch
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging as hf_logging

from spt_hf.recipes.arguments import COMPILE_NOTICE, OncePerProcess, PhaseTrainingArguments


@pytest.mark.skipif(torch.cuda.is_available(), reason="transformers warns only without an Ampere GPU")
def test_the_torch_compile_notice_is_shown_once_a_process(tmp_path, monkeypatch, request):
    """A phase builds its TrainingArguments several times (the recipe, its output folder, its metric); each
    construction with `torch_compile` made transformers warn again (five lines a phase)."""
    logger = logging.getLogger("transformers.training_args")
    (once,) = [f for f in logger.filters if isinstance(f, OncePerProcess) and f.prefix == COMPILE_NOTICE]
    monkeypatch.setattr(once, "shown", False)  # as in a fresh process, whatever earlier tests built
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()  # tests/helpers.py keeps transformers to errors
    request.addfinalizer(lambda: hf_logging.set_verbosity(verbosity))
    with CaptureLogger(logger) as captured:
        for _ in range(3):
            PhaseTrainingArguments(output_dir=str(tmp_path), torch_compile=True)
    assert captured.out.count(COMPILE_NOTICE) == 1
    with CaptureLogger(logger) as captured:
        logger.warning("another notice")
    assert "another notice" in captured.out  # the filter passes every other record
