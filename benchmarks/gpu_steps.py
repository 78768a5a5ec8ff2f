"""The steps of benchmarks/gpu_check.sh, one per call: `parity`, `compile`, `crossover`, `fsdp` (the estimate step is
bench_estimate.py). Each prints one JSON line per measurement and ends with a one-line summary `STEP ok|FAILED ...`;
the exit status is 1 when a check failed. `--dry_run`: on the CPU at tiny sizes, what CI runs so that the GPU check
cannot rot (the device is then the CPU against itself).

    python benchmarks/gpu_steps.py parity      # CUDA against CPU, every architecture and head; bf16; sync audit
    python benchmarks/gpu_steps.py compile     # bf16 torch.compile over 11 padded lengths: graphs, breaks, times
    python benchmarks/gpu_steps.py crossover   # NPLR's Cauchy sums against blocked powers, timed on the device
    python benchmarks/gpu_steps.py fsdp        # FSDP2, one rank, bf16 policy: kernels equal the float32 ones
"""

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / sub) for sub in ("", "models")]
from helpers import TINY_CONFIGS, make_config, no_causal_mode  # noqa: E402  (the tests' architecture table)
from test_host_sync import SyncRecorder  # noqa: E402
from test_modeling_common import HEADS, head_inputs, main_output  # noqa: E402

import spt_hf.modeling.modeling_s4 as s4_module  # noqa: E402
from spt_hf.data.collators import pad_tokens  # noqa: E402
from spt_hf.modeling.value_checks import value_checks  # noqa: E402

DRY_ENTRIES = ("s4d-postbn", "mega-chunk-laplace")  # BatchNorm, an EMA, attention


def emit(**row) -> None:
    print(json.dumps(row), flush=True)


def to(inputs: dict, device: str) -> dict:
    return {key: value.to(device) if torch.is_tensor(value) else value for key, value in inputs.items()}


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def parity_case(entry, head: str, kind: str, device: str) -> dict:
    """fp32 outputs on the device against the CPU, a bf16 autocast step NaN-free, the synchronising operators."""
    overrides = {"bidirectional": False} if head == "causal_lm" else {}
    torch.manual_seed(0)
    model = HEADS[head].from_config(make_config(entry, kind, **overrides)).eval()
    inputs = head_inputs(model, head)
    with torch.no_grad():
        want = main_output(model(**inputs)).double()
        got = main_output(copy.deepcopy(model).to(device)(**to(inputs, device))).double().cpu()
    error = ((got - want).norm() / want.norm().clamp(min=1e-30)).item()
    model = model.to(device).train()
    with value_checks(model, enabled=False), SyncRecorder() as recorder:
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            outputs = model(**to(inputs, device))
        loss = main_output(outputs).float().square().mean() if head == "model" else outputs.loss
        loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    finite = bool(torch.isfinite(loss).item() and all(torch.isfinite(g).all().item() for g in grads))
    return {"fp32_relative_error": error, "bf16_finite": finite, "syncs": sorted(set(recorder.found))}


def parity(args) -> bool:
    entries = [e for e in TINY_CONFIGS if not args.dry_run or e[0] in DRY_ENTRIES]
    failures = 0
    for entry in entries:
        for head in HEADS:
            if head == "causal_lm" and no_causal_mode(entry):
                continue
            for kind in ("tokens", "continuous"):
                row = parity_case(entry, head, kind, args.device)
                ok = row["fp32_relative_error"] < 1e-4 and row["bf16_finite"]
                ok = ok and (not row["syncs"] or entry[1] == "spt_backbone")  # transformers' own layers may sync
                failures += not ok
                emit(step="parity", model=entry[0], head=head, input=kind, ok=ok, **row)
    print(f"parity {'ok' if not failures else 'FAILED'}: {failures} failing of the cases above", flush=True)
    return not failures


COMPILE_CASES = {"s4-nplr": {"max_position_embeddings": 1024}, "s4d-postbn": {}, "dlr": {}, "mega-chunk-laplace": {}}
DRY_CASES = ("s4d-postbn", "dlr")


def compile_lengths(args) -> bool:
    """bf16 autocast training steps of a compiled classifier over 11 lengths, padded to a multiple of 64."""
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._dynamo.utils import counters
    from transformers import AutoModelForSequenceClassification

    lengths = [37, 50, 61, 90, 101, 127, 150, 177, 200, 255, 300] if not args.dry_run else [5, 9, 23]
    multiple, backend_name = (8, "eager") if args.dry_run else (64, "inductor")
    failures = 0
    for name, overrides in COMPILE_CASES.items():
        if args.dry_run and name not in DRY_CASES[:1]:
            continue
        torch.manual_seed(0)
        entry = next(e for e in TINY_CONFIGS if e[0] == name)
        model = AutoModelForSequenceClassification.from_config(make_config(entry, **overrides)).to(args.device)
        torch._dynamo.reset()
        counters.clear()
        backend = CompileCounterWithBackend(backend_name)
        compiled = torch.compile(model.train(), backend=backend)
        times = []
        for length in lengths:
            rows = [torch.randint(4, 20, (n,)) for n in (length, length // 2 + 1)]
            ids, mask = pad_tokens(rows, multiple)
            start = time.perf_counter()
            with torch.autocast(device_type=args.device, dtype=torch.bfloat16):
                loss = compiled(**to({"input_ids": ids, "attention_mask": mask}, args.device), labels=None).logits
            loss.float().square().mean().backward()
            synchronize(args.device)
            times.append(round(time.perf_counter() - start, 4))
        breaks = sum(counters["graph_break"].values())
        ok = breaks == 0 and backend.frame_count <= 7
        failures += not ok
        emit(step="compile", model=name, graphs=backend.frame_count, graph_breaks=breaks, seconds=times, ok=ok)
    print(f"compile {'ok' if not failures else 'FAILED'}: {failures} models with breaks or > 7 graphs", flush=True)
    return not failures


def time_call(fn, device: str, repeats: int) -> float:
    fn()  # warm-up (plans, compilation of kernels)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / repeats


def crossover(args) -> bool:
    """Forward + backward of NPLR's two kernel algorithms at (directions + 1) x L work; `_CAUCHY_MAX_WORK` is the
    largest work at which the Cauchy sums should still be picked."""
    from spt_hf.modeling.configuration_s4 import S4Config
    from spt_hf.modeling.modeling_s4 import S4KernelNPLR

    hidden, state, lengths = (8, 8, [64, 256]) if args.dry_run else (128, 64, [512, 1024, 2048, 4096, 8192, 16384])
    faster_powers = []
    for bidirectional in (False, True):
        for length in lengths:
            config = S4Config(vocab_size=8, hidden_size=hidden, state_size=state, max_position_embeddings=length,
                              bidirectional=bidirectional)  # fmt: skip
            kernel = S4KernelNPLR(config).to(args.device)
            seconds = {}
            for algorithm in ("_cauchy_kernel", "_powers_kernel"):
                compute = getattr(kernel, algorithm)

                def step(compute=compute, length=length):
                    compute(length).square().sum().backward()

                seconds[algorithm.strip("_").split("_")[0]] = round(time_call(step, args.device, args.repeats), 5)
            work = (kernel.channels + 1) * length
            if seconds["powers"] < seconds["cauchy"]:
                faster_powers.append(work)
            emit(step="crossover", bidirectional=bidirectional, length=length, work=work, **seconds)
    print(f"crossover ok: powers faster from work {min(faster_powers, default=None)}; the code switches above "
          f"{s4_module._CAUCHY_MAX_WORK}", flush=True)  # fmt: skip
    return True


def record_kernels(model, modules) -> list:
    """The kernels the float32 modules compute in a forward (MEGA's EMA computes its own inside its forward)."""
    recorded = []
    for module in modules:
        if hasattr(module, "omega"):

            def kernel(length, _compute=module.kernel):
                out = _compute(length)
                recorded.append(out.detach().float().cpu())
                return out

            module.kernel = kernel
        else:
            module.register_forward_hook(lambda mod, inp, out: recorded.append(out.detach().float().cpu()))
    return recorded


def fsdp(args) -> bool:
    """FSDP2 on one rank with a bf16 MixedPrecisionPolicy: every SSM/EMA kernel equals the unsharded float32 one."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoModel

    from spt_hf.modeling.precision import float32_modules, shard_float32_modules

    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1)
    mesh = init_device_mesh(args.device, (1,))
    failures = 0
    for name in DRY_CASES if args.dry_run else COMPILE_CASES:
        entry = next(e for e in TINY_CONFIGS if e[0] == name)
        results = []
        for sharded in (False, True):
            torch.manual_seed(0)
            model = AutoModel.from_config(make_config(entry)).to(args.device)
            recorded = record_kernels(model, float32_modules(model))
            if sharded:
                shard_float32_modules(model, mesh=mesh)
                fully_shard(model, mesh=mesh, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
            ids = torch.randint(4, 20, (2, 64), generator=torch.Generator().manual_seed(1)).to(args.device)
            model(input_ids=ids).last_hidden_state.float().square().mean().backward()
            results.append(recorded)
        errors = [((s - r).norm() / r.norm()).item() for s, r in zip(results[1], results[0], strict=True)]
        ok = bool(errors) and max(errors) < 1e-5
        failures += not ok
        emit(step="fsdp", model=name, kernels=len(errors), max_relative_error=max(errors, default=None), ok=ok)
    dist.destroy_process_group()
    print(f"fsdp {'ok' if not failures else 'FAILED'}: {failures} models whose kernels were rounded", flush=True)
    return not failures


STEPS = {"parity": parity, "compile": compile_lengths, "crossover": crossover, "fsdp": fsdp}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=list(STEPS))
    parser.add_argument("--dry_run", action="store_true", help="CPU, tiny sizes (CI)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.device = "cpu" if args.dry_run else "cuda"
    if not args.dry_run and not torch.cuda.is_available():
        sys.exit(f"{args.step}: no CUDA device; run with --dry_run on a CPU")
    sys.exit(0 if STEPS[args.step](args) else 1)


if __name__ == "__main__":
    main()
