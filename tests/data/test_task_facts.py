"""The facts of a task live on its spec class: the Hub task type of its finetuned models and the generator that
writes its files. Everything else (model cards, audio sampling rates, `generate-data`, recipes' `generate_data:`)
reads them there."""

import pytest

from spt_hf.data import get_task_spec
from spt_hf.data.generators import check_generate_options, generated_lengths
from spt_hf.data.tasks import GENERATED_TASKS, TASKS, hub_task_type
from spt_hf.preprocessing import audio_sampling_rate

HUB_TASK_TYPES = {"text-classification", "image-classification", "audio-classification", "tabular-regression", "other"}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_declares_a_known_hub_task_type(name):
    assert TASKS[name].HUB_TASK_TYPE in HUB_TASK_TYPES
    assert hub_task_type(name) == TASKS[name].HUB_TASK_TYPE


def test_an_unknown_task_name_is_other():
    assert hub_task_type("my_own_task") == "other"


def test_regression_and_audio_tasks_say_so():
    assert TASKS["bidmc"].HUB_TASK_TYPE == "tabular-regression"
    assert {name for name, cls in TASKS.items() if cls.HUB_TASK_TYPE == "audio-classification"} == {
        "speech_commands",
        "spoken_digits",
    }
    assert audio_sampling_rate(get_task_spec("spoken_digits")) == 16_000
    assert audio_sampling_rate(get_task_spec("digits")) is None


def test_generated_tasks_are_those_with_a_generator():
    assert GENERATED_TASKS == ("listops", "pathfinder", "pathx", "pathx256")
    for name in GENERATED_TASKS:
        check_generate_options(name, 1, 1, 1)  # each one the generators accept
    with pytest.raises(ValueError, match="Cannot generate 'digits'"):
        check_generate_options("digits", 1, 1, 1)


@pytest.mark.parametrize("name", ["pathfinder", "pathx", "pathx256"])
def test_a_generated_image_is_as_long_as_its_task_reads_it(name):
    # the generator's default resolution is the task's own (one home: the spec's `resolution` field)
    assert generated_lengths(name, 2) == [get_task_spec(name).max_length] * 2
