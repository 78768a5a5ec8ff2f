"""The HF Trainer with spt_hf's optimiser groups and crash-safe checkpoints, and the metrics of each phase."""

import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from transformers import EarlyStoppingCallback, EvalPrediction, Trainer, TrainerCallback, TrainerState
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from ..data import IGNORE_INDEX
from ..metrics import load_metric
from ..modeling.precision import float32_modules, shard_float32_modules
from ..modeling.value_checks import value_checks
from ..phases import raise_if_interrupted
from .optim import param_groups
from .run_folder import STAGING_PREFIX, commit_checkpoint, disk_full_error

SAVE_SIGNAL = signal.SIGUSR2  # what submitit (and Slurm's --signal) sends before a job's time limit
INTERRUPTED_EXIT = 75  # the exit status of a phase that saved a checkpoint on the signal and stopped


class SaveOnSignal(TrainerCallback):
    """On `SAVE_SIGNAL`: save a checkpoint at the next step boundary and stop training (`PhaseTrainer.train` then
    exits with `INTERRUPTED_EXIT`, without evaluating or exporting, so that the same command resumes exactly from
    that checkpoint)."""

    early: list[int] = []  # received before training began (`catch_early`)

    def __init__(self):
        self.received: int | None = SaveOnSignal.early[-1] if SaveOnSignal.early else None
        self._previous = None

    def _handle(self, signum, frame) -> None:
        self.received = signum

    @staticmethod
    def catch_early() -> None:
        """Keep the signal from killing the process before training begins (while the data loads): it is
        remembered, and training saves and stops at its first step boundary."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(SAVE_SIGNAL, lambda signum, frame: SaveOnSignal.early.append(signum))
            # (compare's Slurm jobs start the phase with the signal blocked until now; one sent meanwhile arrives here)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {SAVE_SIGNAL})

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(SAVE_SIGNAL, self._handle)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {SAVE_SIGNAL})

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(SAVE_SIGNAL, self._previous)
            self._previous = None

    def on_step_end(self, args, state, control, **kwargs):
        if args.world_size > 1:  # every process stops at the same step, whichever of them got the signal first
            self.received = agreed_max(self.received, args.device)
        if self.received is not None:
            control.should_save = True
            control.should_training_stop = True
        return control


class StopOnDroppedInterrupt(TrainerCallback):
    """A Ctrl-C whose KeyboardInterrupt Python dropped (raised inside a finalizer: `phases.interrupts_latched`) stops
    training at the next step's end, or within the evaluation under way, instead of letting the phase run on to its
    end."""

    def on_step_end(self, args, state, control, **kwargs):
        raise_if_interrupted()

    def on_prediction_step(self, args, state, control, **kwargs):
        raise_if_interrupted()


class PhaseEarlyStopping(EarlyStoppingCallback):
    """transformers' `EarlyStoppingCallback` on the phase's model-selection metric (`selection_metric`), remembering
    the step it stopped at (`stopped_at`). The phase reloads the best checkpoint itself (`_train_and_evaluate`), so
    the Trainer's `load_best_model_at_end` stays off without transformers' warning about it. Its counter is saved in
    every checkpoint: a resumed phase counts on."""

    def __init__(self, early_stopping_patience: int):
        super().__init__(early_stopping_patience=early_stopping_patience)
        self.stopped_at: int | None = None

    def resume_from(self, checkpoint: str) -> None:
        """Count on from the evaluations without improvement that `checkpoint` recorded. transformers restores a
        callback's state only under `restore_callback_states_from_checkpoint`, which would also restore the stop
        flag of a checkpoint saved on a stop signal and replace this object; without it, a resumed phase started
        counting at 0 and trained up to `patience` evaluations longer than one never interrupted."""
        state = TrainerState.load_from_json(str(Path(checkpoint, TRAINER_STATE_NAME)))
        saved = state.stateful_callbacks.get(type(self).__name__) or {}
        saved = saved[0] if isinstance(saved, list) else saved  # (a list when several were saved)
        self.early_stopping_patience_counter = saved.get("attributes", {}).get("early_stopping_patience_counter", 0)

    def on_train_begin(self, args, state, control, **kwargs):
        if args.metric_for_best_model is None:
            raise ValueError("early stopping needs the phase's `metric_for_best_model`; none is set.")

    def on_evaluate(self, args, state, control, metrics, **kwargs):
        super().on_evaluate(args, state, control, metrics, **kwargs)
        if control.should_training_stop and self.early_stopping_patience_counter >= self.early_stopping_patience:
            self.stopped_at = state.global_step


class PhaseClock(TrainerCallback, ExportableState):
    """A phase's wall time across the processes that trained it. Every checkpoint records the time spent up to it
    (`earlier_s`, as the resumed process reads it); a resumed phase counts on from its checkpoint's record: what
    the phase cost up to that checkpoint plus the resumed process (work done after it was lost and is not counted).
    A checkpoint written before checkpoints recorded it holds no record; the time then counts from its step
    (`counted_from_step`). transformers' `restore_callback_states_from_checkpoint` restores the same two values."""

    def __init__(self):
        self.started = time.perf_counter()
        self.earlier_s = 0.0
        self.counted_from_step = 0

    def elapsed(self) -> float:
        return self.earlier_s + time.perf_counter() - self.started

    def state(self) -> dict:
        return {"args": {}, "attributes": {"earlier_s": self.elapsed(), "counted_from_step": self.counted_from_step}}

    def resume_from(self, checkpoint: str) -> None:
        """Count on from the time `checkpoint` recorded (from its step when it recorded none)."""
        state = TrainerState.load_from_json(str(Path(checkpoint, TRAINER_STATE_NAME)))
        saved = state.stateful_callbacks.get(type(self).__name__)
        if saved is None:
            self.earlier_s, self.counted_from_step = 0.0, state.global_step
            return
        attributes = (saved[-1] if isinstance(saved, list) else saved)["attributes"]
        self.earlier_s, self.counted_from_step = attributes["earlier_s"], attributes["counted_from_step"]

    def on_train_begin(self, args, state, control, **kwargs):
        # transformers updates a resumed state's saved callbacks by name: a checkpoint without this record needs one
        state.stateful_callbacks.setdefault(type(self).__name__, self.state())


class ResumedBestByMetric(TrainerCallback):
    """A resumed phase's best checkpoint by the phase's own metric. A checkpoint written while another metric chose
    the best (SPT chose by token accuracy before it chose by loss) records that metric's best value; comparing a loss
    with it would keep the old choice for ever. The best is chosen again from the resumed learning curve, among the
    checkpoints still on disk (ties: the earliest, as the Trainer keeps)."""

    def on_train_begin(self, args, state, control, **kwargs):
        name = args.metric_for_best_model
        key = name if name.startswith("eval_") else f"eval_{name}"
        evaluated = {entry["step"]: entry[key] for entry in state.log_history if key in entry}
        if state.best_metric is None or evaluated.get(state.best_global_step) == state.best_metric:
            return
        folders = {step: Path(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}") for step in evaluated}
        kept = {step: value for step, value in evaluated.items() if folders[step].is_dir()}
        if not kept:
            state.best_metric = state.best_global_step = state.best_model_checkpoint = None
            return
        sign = -1 if args.greater_is_better else 1
        step = min(kept, key=lambda s: (sign * kept[s], s))
        state.best_metric, state.best_global_step, state.best_model_checkpoint = kept[step], step, str(folders[step])


def agreed_max(received: int | None, device) -> int | None:
    """The largest of one number over the processes of a distributed phase (a step's all-reduce; None counts 0):
    the signal some process received, a decision only the main process made; None when it is 0 everywhere."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return received
    flag = torch.tensor([0 if received is None else int(received)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return int(flag.item()) or None


def keep_float32_parameters(model: torch.nn.Module, accelerator, shard: bool = True) -> int:
    """Keep the SSM/EMA parameters (modeling/precision.py) float32 under the accelerator's mixed precision: with FSDP2
    each float32 module becomes its own `fully_shard` unit with a float32 policy (before accelerate shards the rest
    in bf16/fp16); DeepSpeed and FSDP1 with mixed precision round them, and are refused in one line. Returns how
    many modules were sharded (`shard=False`: only the refusals)."""
    state = accelerator.state
    if model is None or accelerator.mixed_precision in (None, "no") or not float32_modules(model):
        return 0
    setting = f"mixed_precision: {accelerator.mixed_precision}"
    if getattr(state, "deepspeed_plugin", None) is not None:
        raise ValueError(
            f"DeepSpeed with {setting} rounds the SSM/EMA parameters to {accelerator.mixed_precision} (kernel errors "
            "of 10-100 %); use FSDP2 (recipes/accelerate/fsdp.yaml) or DDP with bf16, or DeepSpeed without it."
        )
    plugin = getattr(state, "fsdp_plugin", None)
    if plugin is None:  # DDP / one process: autocast, the parameters themselves stay float32
        return 0
    if getattr(plugin, "fsdp_version", 1) != 2:
        raise ValueError(
            f"FSDP1 with {setting} rounds the SSM/EMA parameters; set `fsdp_version: 2` in the accelerate config "
            "(recipes/accelerate/fsdp.yaml), which keeps them float32."
        )
    if not shard:
        return 0
    mesh = getattr(accelerator, "torch_device_mesh", None)
    if mesh is not None:
        mesh = mesh[tuple(accelerator.parallelism_config.fsdp_dim_names)]
    return shard_float32_modules(
        model, mesh=mesh, reshard_after_forward=plugin.reshard_after_forward, offload_policy=plugin.cpu_offload
    )


class PhaseTrainer(Trainer):
    """`Trainer` with spt_hf's optimiser groups (SSM learning rates, no decay on norms and SSM parameters), the epoch
    handed to datasets that draw per-epoch randomness (the SPT masks of `IndexedExamples`), and checkpoints that are
    complete or absent: each is written into a staging folder, given a manifest of the sha256 of its files, and
    renamed into place (`run_folder.commit_checkpoint`); a full disk is one clear error. A process that sees several
    GPUs is refused (no `nn.DataParallel`): a phase runs one process per GPU. DDP does not search for unused
    parameters (none is), the value checks are off in training steps, and the SSM/EMA parameters stay float32 under
    FSDP2 mixed precision (`keep_float32_parameters`)."""

    _staging_root: Path | None = None
    _push_after_commit = False

    def __init__(self, *args, **kwargs):
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if training_args is not None and training_args.n_gpu > 1:
            # transformers would wrap the model in nn.DataParallel: one process stepping on n_gpu x the batch, while
            # world_size (results.json, the recipe fingerprint) says one process of the per-device batch.
            raise ValueError(
                f"{training_args.n_gpu} GPUs are visible to one process; spt_hf runs one process per GPU, not "
                f"nn.DataParallel: `accelerate launch --num_processes {training_args.n_gpu} -m spt_hf ...` (or "
                "`spt-hf compare --accelerate_config`), or CUDA_VISIBLE_DEVICES=0 for one GPU."
            )
        if training_args is not None and training_args.ddp_find_unused_parameters is None:
            # every parameter of an spt_hf model gets a gradient in every step (tests/models/test_host_sync.py):
            # transformers' default (True without gradient checkpointing) would add a graph traversal per DDP step
            training_args.ddp_find_unused_parameters = False
        super().__init__(*args, **kwargs)
        self.add_callback(StopOnDroppedInterrupt())  # (in training and in every evaluation)
        self._float32_sharded = False
        keep_float32_parameters(self.model, self.accelerator, shard=False)  # refuses DeepSpeed/FSDP1 before the data

    def _prepare_for_training(self, *args, **kwargs):
        """Before transformers creates the optimiser and accelerate shards the model: the float32 FSDP2 units."""
        if self.is_fsdp_enabled and not self._float32_sharded:
            keep_float32_parameters(self.model, self.accelerator)
            self._float32_sharded = True
        return super()._prepare_for_training(*args, **kwargs)

    def train(self, *args, **kwargs):
        """`Trainer.train`; on `SAVE_SIGNAL` it saves a checkpoint at the next step boundary and the process exits
        with `INTERRUPTED_EXIT` (the same command resumes from that checkpoint)."""
        saver = SaveOnSignal()
        self.add_callback(saver)
        saver.install()
        try:
            output = super().train(*args, **kwargs)
        finally:
            saver.uninstall()
            self.remove_callback(saver)
        if saver.received is not None and self.state.global_step < self.state.max_steps:
            step = self.state.global_step
            print(
                f"spt_hf: {signal.Signals(saver.received).name} received: saved checkpoint-{step} in "
                f"{self.args.output_dir} and stopped; the same command resumes from it.",
                flush=True,
            )
            raise SystemExit(INTERRUPTED_EXIT)
        return output

    def training_step(self, model, inputs, *args, **kwargs):
        """`Trainer.training_step` without the model's value checks (`config.check_values`): each is a host read, a
        GPU sync per layer and step; evaluation and direct calls keep them. Under `torch_compile`, Performer's
        feature-redraw count happens here (its compiled forward skips it)."""
        if self.args.torch_compile:  # a compiled forward does not count Performer's passes: counted here, eagerly
            self.model.train()
            for module in self.model.modules():
                if hasattr(module, "count_training_call"):
                    module.count_training_call()
        with value_checks(self.model, enabled=False):
            return super().training_step(model, inputs, *args, **kwargs)

    def create_optimizer(self, model=None):
        if self.optimizer is None:
            opt_model = self.model if model is None else model
            groups = param_groups(opt_model, self.args.learning_rate, self.args.weight_decay)
            optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
            self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer

    def _run_epoch(self, *args, **kwargs):
        # Before the epoch's data loader is iterated (and its workers are started with a copy of the dataset).
        if hasattr(self.train_dataset, "set_epoch"):
            self.train_dataset.set_epoch(kwargs["epoch"])
        return super()._run_epoch(*args, **kwargs)

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        if self._staging_root is not None:  # inside `_save_checkpoint`: push once the checkpoint is committed
            self._push_after_commit = True
            return
        super()._push_from_checkpoint(checkpoint_folder)

    def _get_output_dir(self, trial) -> str:
        return str(self._staging_root) if self._staging_root is not None else super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        """transformers' checkpoint, written into `<run_dir>/.staging-N/checkpoint-N`, then committed."""
        run_dir = Path(super()._get_output_dir(trial))
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging_root = run_dir / f"{STAGING_PREFIX}{self.state.global_step}"
        if self.args.should_save:
            shutil.rmtree(staging_root, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self._staging_root = staging_root
        try:
            super()._save_checkpoint(model, trial)
        except Exception as error:
            full = disk_full_error(error, staging_root, name, run_dir, self._checkpoint_bytes())
            shutil.rmtree(staging_root, ignore_errors=True)
            if full is None:
                raise
            raise full from error
        finally:
            self._staging_root = None
        self.accelerator.wait_for_everyone()
        final = run_dir / name
        staged_as_best = self.state.best_model_checkpoint == str(staging_root / name)
        if staged_as_best:  # on every process: each one loads the best model at the end
            self.state.best_model_checkpoint = str(final)
        if self.args.should_save:
            if staged_as_best:  # the state in the checkpoint was saved with the staging path
                self.state.save_to_json(str(staging_root / name / TRAINER_STATE_NAME))
            try:
                commit_checkpoint(staging_root / name, final)
            except OSError as error:
                full = disk_full_error(error, staging_root, name, run_dir, self._checkpoint_bytes())
                if full is None:
                    raise
                raise full from error
            finally:
                shutil.rmtree(staging_root, ignore_errors=True)
            if self._push_after_commit:
                self._push_after_commit = False
                self._push_from_checkpoint(str(final))
            rotate_checkpoints(
                output_dir=str(run_dir),
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
            )
        self.accelerator.wait_for_everyone()

    def _checkpoint_bytes(self) -> int:
        """About the bytes a checkpoint writes: the model's weights and buffers and the optimiser's state tensors."""
        tensors = [*self.model.parameters(), *self.model.buffers()]
        optimizer = getattr(self.optimizer, "optimizer", self.optimizer)  # accelerate's wrapper holds the real one
        if optimizer is not None:
            tensors += [
                value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)
            ]
        return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def _first(value):
    return value[0] if isinstance(value, tuple | list) else value


def token_argmax(logits, labels):
    """Keep only argmax ids of LM logits during evaluation (the full (B, L, V) tensor is not needed)."""
    return _first(logits).argmax(-1)


def masked_accuracy_metrics() -> Callable[[EvalPrediction], dict]:
    """Accuracy of the predicted tokens at the masked positions (labels != -100)."""

    def compute(prediction: EvalPrediction) -> dict:
        predictions, labels = np.asarray(prediction.predictions), np.asarray(prediction.label_ids)
        keep = labels != IGNORE_INDEX
        result = load_metric("accuracy").compute(predictions=predictions[keep], references=labels[keep])
        return {"masked_accuracy": result["accuracy"]}

    return compute


def causal_accuracy_metrics() -> Callable[[EvalPrediction], dict]:
    """Next-token accuracy: the prediction at t is scored against the label at t + 1."""

    def compute(prediction: EvalPrediction) -> dict:
        predictions = np.asarray(prediction.predictions)[:, :-1]
        labels = np.asarray(prediction.label_ids)[:, 1:]
        keep = labels != IGNORE_INDEX
        result = load_metric("accuracy").compute(predictions=predictions[keep], references=labels[keep])
        return {"next_token_accuracy": result["accuracy"]}

    return compute


def classification_metrics(problem_type: str) -> Callable[[EvalPrediction], dict]:
    """Accuracy for classification, R² and MSE for regression (shipped `evaluate` modules)."""
    if problem_type == "regression":

        def compute(prediction: EvalPrediction) -> dict:
            predictions = np.asarray(_first(prediction.predictions), dtype=np.float32).reshape(-1)
            return load_metric("r2").compute(
                predictions=predictions, references=np.asarray(prediction.label_ids).reshape(-1)
            )

        return compute

    def compute(prediction: EvalPrediction) -> dict:
        predictions = np.asarray(_first(prediction.predictions)).argmax(-1)
        return load_metric("accuracy").compute(predictions=predictions, references=np.asarray(prediction.label_ids))

    return compute


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


SPTTrainer = PhaseTrainer  # the name before the rename, for code that imports it
