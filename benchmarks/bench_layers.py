"""Speed and memory of one sequence-mixing layer, ours against a straightforward reference of the same maths.

Protocol (docs/benchmarks.md): forward + backward of one layer on (B, L, d) inputs, B = 8; ours and the reference
hold the same weights, are checked to give the same outputs, and are timed interleaved (A, B, A, B, ...) in one
process after warm-up steps; we report the ratio of medians, the median of per-pair ratios, the machine lower bound
(matmul FLOPs / the machine's matmul rate + FFT FLOPs / its FFT rate, both measured at start-up) and measured /
lower bound. For the SSM layers, the floor is the time of the same FFTs and GEMMs run alone at the layer's shapes
(`primitive_floor`): floor / bound says how near torch's own transforms and GEMMs come to the bound there, ours /
floor what the rest of the layer (kernel, pointwise work, layout) costs on top; the kernel's own forward + backward
is timed apart (kernel / bound). Peak memory is measured for each side in a separate subprocess (VmHWM, under an
address-space limit), with the minor page faults and system CPU time of one steady-state step: the allocation churn
of mapping fresh large tensors every step. /proc/stat tells how much CPU other processes used during the timed loop;
absolute numbers only count when that is below ~5%. On a GPU (`--device cuda`, optionally `--dtype bf16` for
autocast) the memory is the peak CUDA allocation and the CPU lower bound is not reported.

    python benchmarks/bench_layers.py --quick
    python benchmarks/bench_layers.py --layers s4 s4d --d 128 --L 1024 4096 16384 --steps 5
    python benchmarks/bench_layers.py --device cuda --dtype bf16 --d 128 256 --no_memory
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from common import DTYPES, status_mib  # noqa: E402

from spt_hf.modeling.configuration_dlr import DLRConfig  # noqa: E402
from spt_hf.modeling.configuration_s4 import S4Config  # noqa: E402
from spt_hf.modeling.modeling_dlr import DLRMixer  # noqa: E402
from spt_hf.modeling.modeling_s4 import S4Mixer  # noqa: E402
from spt_hf.modeling.ssm import as_complex  # noqa: E402

# The machine's ceilings: measured at start-up (`measure_ceilings`), or with `--recorded_ceilings` those of the AMD EPYC
# 2-core machine of docs/benchmarks.md, on which the README's ratios were measured.
RECORDED_CEILINGS = {"matmul_flops_per_s": 196e9, "fft_flops_per_s": 16.7e9}
CEILINGS = dict(RECORDED_CEILINGS)
LAYERS = ("s4", "s4-bi", "s4d", "dlr64", "dlr1024", "attention")
ADDRESS_SPACE_LIMIT = 20 << 30  # an impossible allocation fails fast instead of waking the OOM killer


# ----------------------------------------------------------------------------------------------------------------
# References: the same maths, written the straightforward way (as the paper's official code does on CPU)
# ----------------------------------------------------------------------------------------------------------------


def reference_fft_conv(u: torch.Tensor, kernel: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """Official-code FFT convolution: (B, H, L) layout, `n=2L` padding, backward kernel flipped to lags -1..-L."""
    length = u.shape[1]
    x = u.transpose(1, 2)  # (B, H, L)
    k = kernel[..., :length]
    if k.shape[0] == 2:
        k = F.pad(k[0], (0, length)) + F.pad(k[1].flip(-1), (length, 0))  # (H, 2L)
    else:
        k = k[0]
    y = torch.fft.irfft(torch.fft.rfft(x, n=2 * length) * torch.fft.rfft(k, n=2 * length), n=2 * length)
    return (y[..., :length] + D[:, None] * x).transpose(1, 2)  # (B, L, H)


def reference_s4d_kernel(kernel, length: int) -> torch.Tensor:
    """Complex-exp Vandermonde: K = 2 Re Σ_n C_n B̄_n exp(l log Ā_n), an (H, N/2, L) complex exp."""
    _, transition, input_vec = kernel.discretize(torch.float32)
    steps = torch.arange(length, device=transition.device)
    vandermonde = torch.exp(torch.log(transition).unsqueeze(-1) * steps)  # (H, N/2, L)
    return 2 * torch.einsum("chn,hnl->chl", as_complex(kernel.C) * input_vec, vandermonde).real


def reference_nplr_kernel(kernel, length: int) -> torch.Tensor:
    """The official S4 NPLR kernel: naive Cauchy over a full (2C+2... , H, N, L/2+1) complex tensor + Woodbury."""
    dt, lam, B = kernel._ssm(torch.float32)
    P = kernel._tile(as_complex(kernel.P))
    C = as_complex(kernel.C)  # (C, H, N/2), already C̃ for this length
    bins = torch.arange(length // 2 + 1, device=dt.device)
    omega = torch.exp(-2j * math.pi * bins / length).to(torch.complex64)
    z = 2 * (1 - omega) / (1 + omega)  # bilinear map of the roots of unity
    left = torch.cat([B.unsqueeze(0), P.unsqueeze(0)])  # (2, H, N/2)
    right = torch.cat([C, P.conj().unsqueeze(0)])  # (C+1, H, N/2)
    v = left.unsqueeze(1) * right.unsqueeze(0) * dt[:, None]  # (2, C+1, H, N/2)
    w = lam * dt[:, None]  # (H, N/2)
    v, w = torch.cat([v, v.conj()], -1), torch.cat([w, w.conj()], -1)  # both members of each pair
    r = (v.unsqueeze(-1) / (z - w.unsqueeze(-1))).sum(-2)  # cauchy_naive: (2, C+1, H, L/2+1)
    k_f = r[:-1, :-1] - r[:-1, -1:] * r[-1:, :-1] / (1 + r[-1:, -1:])  # Woodbury
    k_f = k_f * 2 / (1 + omega)
    return torch.fft.irfft(k_f, n=length)[0]  # (C, H, L)


def reference_dlr_kernel(kernel, length: int) -> torch.Tensor:
    """Explicit (N, L) exp table: K = Re(W @ exp(λ l))."""
    eigenvalues = kernel.eigenvalues(torch.float32)
    table = torch.exp(eigenvalues.unsqueeze(-1) * torch.arange(length, device=eigenvalues.device))  # (N, L)
    return torch.einsum("chn,nl->chl", as_complex(kernel.W), table).real


class ReferenceSSMLayer(nn.Module):
    """The SSM layer with a reference kernel and FFT convolution, sharing the parameters of `ours`."""

    def __init__(self, ours: nn.Module, kernel_fn):
        super().__init__()
        self.ours, self.kernel_fn = ours, kernel_fn

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        kernel = self.kernel_fn(self.ours.kernel, hidden_states.shape[1])
        y = reference_fft_conv(hidden_states, kernel, self.ours.D)
        return F.glu(self.ours.output_linear(F.gelu(y)), dim=-1)


class AttentionLayer(nn.Module):
    """Rotary multi-head self-attention (bidirectional, 4 heads); rotary tables built once, as the backbone does."""

    def __init__(self, d: int, length: int, implementation: str, source: nn.Module | None = None):
        super().__init__()
        from spt_hf.modeling.configuration_rotary_transformer import RotaryTransformerConfig
        from spt_hf.modeling.modeling_rotary_transformer import (
            RotaryTransformerAttention,
            RotaryTransformerRotaryEmbedding,
        )

        config = RotaryTransformerConfig(vocab_size=10, hidden_size=d, num_attention_heads=4)
        config._attn_implementation = implementation
        self.attention = RotaryTransformerAttention(config, 0)
        if source is not None:
            self.attention.load_state_dict(source.attention.state_dict())
        rotary = RotaryTransformerRotaryEmbedding(config)
        cos, sin = rotary(torch.zeros(1, length, d), torch.arange(length).unsqueeze(0))
        self.register_buffer("cos", cos, persistent=False)  # buffers: they follow .to(device)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.attention(hidden_states, position_embeddings=(self.cos, self.sin))


def build(layer: str, d: int, length: int) -> tuple[nn.Module, nn.Module | None, str]:
    """(ours, reference or None if it cannot run here, note)."""
    torch.manual_seed(0)
    if layer == "attention":
        ours = AttentionLayer(d, length, "sdpa")
        scores_bytes = 8 * 4 * length * length * 4
        if scores_bytes * 3 > ADDRESS_SPACE_LIMIT:
            return ours, None, f"naive attention needs {3 * scores_bytes / 2**30:.0f} GiB of (B, heads, L, L) scores"
        return ours, AttentionLayer(d, length, "eager", source=ours), ""
    if layer.startswith("dlr"):
        config = DLRConfig(vocab_size=10, hidden_size=d, state_size=int(layer[3:]), bidirectional=False)
        ours = DLRMixer(config, 0)
        return ours, ReferenceSSMLayer(ours, reference_dlr_kernel), ""
    kind = "diag" if layer == "s4d" else "nplr"
    config = S4Config(
        vocab_size=10, hidden_size=d, kernel=kind, bidirectional=layer == "s4-bi", max_position_embeddings=length
    )
    ours = S4Mixer(config, 0)
    reference_kernel = reference_s4d_kernel if kind == "diag" else reference_nplr_kernel
    return ours, ReferenceSSMLayer(ours, reference_kernel), ""


# ----------------------------------------------------------------------------------------------------------------
# Lower bound
# ----------------------------------------------------------------------------------------------------------------


def lower_bound(layer: str, batch: int, d: int, length: int) -> dict:
    """Matmul and FFT FLOPs of one forward + backward (backward = 2x the forward matmuls) and the time they need."""
    tokens = batch * length
    if layer == "attention":
        matmul = 3 * (4 * 2 * tokens * d * d + 2 * 2 * batch * length * length * d)  # projections, QKᵀ and PV
        return _bound(matmul, 0.0)
    matmul = 3 * 2 * tokens * d * 2 * d  # output Linear(H, 2H)
    channels = 2 if layer == "s4-bi" else 1
    n = 2 * length
    transform = 2.5 * n * math.log2(n)
    fft = 4 * batch * d * transform + 2 * d * transform  # rfft(u), irfft(y), rfft(grad), irfft(grad u); kernel side
    if layer == "s4d":  # blocked Vandermonde contraction
        matmul += 3 * 2 * channels * d * length * 64
    elif layer.startswith("dlr"):  # one GEMM against the (N, L) powers
        matmul += 3 * 2 * channels * d * length * 2 * int(layer[3:])
    else:  # Cauchy contraction: (2M x N/2) @ (N/2 x 2F) per feature, M = 2C + 2
        matmul += 3 * 2 * d * 2 * (2 * channels + 2) * 32 * (length + 2)
    return _bound(matmul, fft)


def _bound(matmul: float, fft: float) -> dict:
    return {
        "matmul_gflop": matmul / 1e9,
        "fft_gflop": fft / 1e9,
        "seconds": matmul / CEILINGS["matmul_flops_per_s"] + fft / CEILINGS["fft_flops_per_s"],
    }


def median_seconds(fn, repeats: int) -> float:
    """Median wall time of `repeats` calls of `fn` after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def primitive_floor(layer: str, batch: int, d: int, length: int, repeats: int = 5) -> dict | None:
    """Seconds of the transforms and GEMMs an SSM layer cannot avoid, run alone at the layer's own shapes: the four
    FFT passes the bound counts (rfft of the padded input and of the padded gradient, irfft of both products) over
    the convolution's chunks, and the output Linear's three GEMMs (forward, input and weight gradients), all into
    preallocated buffers. No kernel, no pointwise work: what the layer's time would be if everything else were free.
    None for attention (no FFT; its bound is the GEMMs alone)."""
    if layer == "attention":
        return None
    from spt_hf.modeling import ssm

    chunks = [(bs.stop - bs.start, hs.stop - hs.start) for bs, hs in ssm._chunks(batch, d, length, torch.device("cpu"))]
    signal = torch.randn(max(b for b, _ in chunks), max(h for _, h in chunks), 2 * length)
    spectrum = torch.fft.rfft(signal)
    rows, weight = torch.randn(batch * length, d), torch.randn(2 * d, d)
    z, grad_z = torch.empty(batch * length, 2 * d), torch.randn(batch * length, 2 * d)
    grad_x, grad_w = torch.empty(batch * length, d), torch.empty(2 * d, d)

    def ffts() -> None:
        for b, h in chunks:
            for _ in range(2):  # forward, then backward
                torch.fft.rfft(signal[:b, :h], out=spectrum[:b, :h])
                torch.fft.irfft(spectrum[:b, :h], n=2 * length, out=signal[:b, :h])

    def gemms() -> None:
        torch.mm(rows, weight.T, out=z)
        torch.mm(grad_z, weight, out=grad_x)
        torch.mm(grad_z.T, rows, out=grad_w)

    fft_s, gemm_s = median_seconds(ffts, repeats), median_seconds(gemms, repeats)
    return {"seconds": fft_s + gemm_s, "fft_s": fft_s, "gemm_s": gemm_s}


def kernel_seconds(module: nn.Module, length: int, repeats: int = 5) -> float | None:
    """Median seconds of the SSM kernel's own forward + backward (it does not depend on the batch); None without one."""
    kernel = getattr(module, "kernel", None)
    if kernel is None:
        return None

    def step() -> None:
        module.zero_grad(set_to_none=True)
        k = kernel(length)
        k.backward(torch.ones_like(k))

    return median_seconds(step, repeats)


def measure_ceilings(repeats: int = 7) -> dict:
    """This machine's fp32 rates at the benchmark's thread count (the medians of `repeats` calls after a warm-up): a
    2048 x 2048 matmul, and rfft of 1024 channels x 16384 counted as 2.5 n log2 n per transform, the best of taking
    them all at once or 64 or 128 channels at a time. All at once, the 64 MiB output is mapped afresh by the allocator
    at every call, and its page faults halved the rate on the Intel machine (18 against 35 GFLOP/s in chunks)."""

    def rate(fn, flops: float) -> float:
        return flops / median_seconds(fn, repeats)

    def chunked_rfft(signal: torch.Tensor, channels: int):
        def run():
            for start in range(0, signal.shape[0], channels):
                torch.fft.rfft(signal[start : start + channels])

        return run

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    signal = torch.randn(1024, 16384)
    fft_flops = 1024 * 2.5 * 16384 * math.log2(16384)
    return {
        "matmul_flops_per_s": rate(lambda: torch.mm(a, b), 2 * 2048**3),
        "fft_flops_per_s": max(rate(chunked_rfft(signal, channels), fft_flops) for channels in (1024, 128, 64)),
    }


# ----------------------------------------------------------------------------------------------------------------
# Timing, CPU contention, memory
# ----------------------------------------------------------------------------------------------------------------


def train_step(module: nn.Module, x: torch.Tensor, grad: torch.Tensor, dtype: torch.dtype) -> float:
    """Forward (under autocast unless fp32) and backward; seconds taken."""
    module.zero_grad(set_to_none=True)
    x.grad = None
    start = time.perf_counter()
    with torch.autocast(device_type=x.device.type, dtype=dtype, enabled=dtype != torch.float32):
        out = module(x)
    out.backward(grad.to(out.dtype))
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, sum(fields[:8])


def wait_for_quiet(seconds: float, threshold: float = 0.1) -> float:
    """Wait (up to `seconds`) until other processes use less than `threshold` of all CPUs; return the last share."""
    deadline = time.monotonic() + seconds
    while True:
        busy0, total0 = cpu_ticks()
        time.sleep(1.0)
        busy1, total1 = cpu_ticks()
        share = (busy1 - busy0) / max(1, total1 - total0)
        if share < threshold or time.monotonic() > deadline:
            return share
        time.sleep(10.0)


def timed_pairs(ours: nn.Module, reference: nn.Module | None, x, grad, dtype, warmup: int, steps: int) -> dict:
    for _ in range(warmup):
        train_step(ours, x, grad, dtype)
        if reference is not None:
            train_step(reference, x, grad, dtype)
    busy0, total0 = cpu_ticks()
    own0 = os.times()
    times_ours, times_ref = [], []
    for _ in range(steps):
        times_ours.append(train_step(ours, x, grad, dtype))
        if reference is not None:
            times_ref.append(train_step(reference, x, grad, dtype))
    busy1, total1 = cpu_ticks()
    own1 = os.times()
    hz = os.sysconf("SC_CLK_TCK")
    own = (own1.user + own1.system - own0.user - own0.system) * hz
    other = max(0.0, (busy1 - busy0) - own) / max(1, total1 - total0)  # share of all CPUs used by others
    return {"ours": times_ours, "reference": times_ref, "other_cpu": other}


def probe_memory(layer: str, d: int, length: int, side: str, args) -> dict:
    """Run one configuration in a fresh subprocess and read its peak memory and page faults."""
    command = [sys.executable, __file__, "--probe", layer, str(d), str(length), side, "--batch", str(args.batch)]
    command += ["--device", args.device, "--dtype", args.dtype]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(lines[-1])


def probe(layer: str, d: int, length: int, side: str, batch: int, device: torch.device, dtype: torch.dtype) -> None:
    """Subprocess body: setup, then three training steps of one side. Prints the peak and over-setup memory in MiB
    (CPU: VmHWM; CUDA: peak allocation) and, for the third (steady-state) step, the minor page faults, the system
    CPU seconds and their share of the step's CPU time."""
    if device.type == "cpu":  # CUDA reserves a huge virtual address space: no limit there
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
    torch.set_num_threads(2)
    ours, reference, note = build(layer, d, length)
    module = ours if side == "ours" else reference
    if module is None:
        raise SystemExit(note)
    module.to(device)
    x = torch.randn(batch, length, d, device=device, requires_grad=True)
    grad = torch.randn(batch, length, d, device=device)
    setup = status_mib("VmRSS")
    for _ in range(2):
        train_step(module, x, grad, dtype)
    before = resource.getrusage(resource.RUSAGE_SELF)
    seconds = train_step(module, x, grad, dtype)
    after = resource.getrusage(resource.RUSAGE_SELF)
    system = after.ru_stime - before.ru_stime
    cpu = system + after.ru_utime - before.ru_utime
    churn = {"faults_per_step": after.ru_minflt - before.ru_minflt, "system_s": round(system, 3)}
    churn.update(system_share=round(system / max(cpu, 1e-9), 3), step_s=round(seconds, 3))
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
        print(json.dumps({"peak_mib": round(peak), "over_setup_mib": round(peak), **churn}))
        return
    peak = status_mib("VmHWM")
    print(json.dumps({"peak_mib": round(peak), "over_setup_mib": round(peak - setup), **churn}))


# ----------------------------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------------------------


def run_one(layer: str, d: int, length: int, args) -> dict:
    device = torch.device(args.device)
    ours, reference, note = build(layer, d, length)
    ours, reference = ours.to(device), None if reference is None else reference.to(device)
    x = torch.randn(args.batch, length, d, device=device, requires_grad=True)
    grad = torch.randn(args.batch, length, d, device=device)
    result = {"layer": layer, "d": d, "L": length, "B": args.batch, "device": args.device, "dtype": args.dtype}
    result["note"] = note
    with torch.no_grad():
        y = ours(x)
    if args.wait_quiet:
        result["busy_before"] = round(wait_for_quiet(args.wait_quiet), 3)
    try:  # the address-space limit turns an impossible reference allocation into an error, not the OOM killer
        if reference is not None:
            with torch.no_grad():
                result["max_abs_diff"] = (y - reference(x)).abs().max().item()
            result["max_abs_output"] = y.abs().max().item()
        timing = timed_pairs(ours, reference, x, grad, DTYPES[args.dtype], args.warmup, args.steps)
    except (RuntimeError, MemoryError) as error:  # torch.OutOfMemoryError is a RuntimeError
        out_of_memory = isinstance(error, MemoryError) or "alloc" in str(error) or "out of memory" in str(error)
        if reference is None or not out_of_memory:
            raise
        torch.cuda.empty_cache() if device.type == "cuda" else None
        reference, result["note"] = None, f"reference out of memory under the {ADDRESS_SPACE_LIMIT >> 30} GiB limit"
        timing = timed_pairs(ours, None, x, grad, DTYPES[args.dtype], args.warmup, args.steps)
    tokens = args.batch * length
    median_ours = statistics.median(timing["ours"])
    result.update(ours_s=median_ours, ours_tok_s=tokens / median_ours, other_cpu=round(timing["other_cpu"], 3))
    bound = lower_bound(layer, args.batch, d, length) if device.type == "cpu" else None  # a CPU machine bound
    if bound is not None:
        result.update(lower_bound_s=bound["seconds"], ours_over_bound=median_ours / bound["seconds"])
        result.update(matmul_gflop=round(bound["matmul_gflop"], 2), fft_gflop=round(bound["fft_gflop"], 2))
        floor = primitive_floor(layer, args.batch, d, length)
        if floor is not None:
            result.update(floor_s=floor["seconds"], floor_fft_s=floor["fft_s"], floor_gemm_s=floor["gemm_s"])
            result.update(floor_over_bound=floor["seconds"] / bound["seconds"])
            result["ours_over_floor"] = median_ours / floor["seconds"]
        kernel_s = kernel_seconds(ours, length)
        if kernel_s is not None:
            result.update(kernel_s=kernel_s, kernel_over_bound=kernel_s / bound["seconds"])
    if reference is not None:
        median_ref = statistics.median(timing["reference"])
        pairs = [r / o for r, o in zip(timing["reference"], timing["ours"])]
        result.update(ref_s=median_ref, ref_tok_s=tokens / median_ref)
        if bound is not None:
            result["ref_over_bound"] = median_ref / bound["seconds"]
        result.update(speedup_of_medians=median_ref / median_ours, median_pair_speedup=statistics.median(pairs))
    if args.memory:
        result["ours_memory"] = probe_memory(layer, d, length, "ours", args)
        if reference is not None:
            result["ref_memory"] = probe_memory(layer, d, length, "reference", args)
    return result


def markdown(results: list[dict]) -> str:
    head = (
        "| layer | d | L | ours tok/s | ref tok/s | speedup (medians / pairs) | ours / bound | ref / bound "
        "| floor / bound | kernel / bound | ours / floor | peak MiB ours / ref | page faults per step ours / ref "
        "| system CPU share ours / ref | max abs diff | other CPU |\n|" + "---|" * 16
    )
    rows = [head]

    def both(r: dict, key: str, fmt: str) -> str:
        return " / ".join(
            format(r[side][key], fmt) if key in r.get(side, {}) else "—" for side in ("ours_memory", "ref_memory")
        )

    for r in results:
        speed = f"{r['speedup_of_medians']:.2f} / {r['median_pair_speedup']:.2f}" if "ref_s" in r else "—"
        reference = f"{r['ref_tok_s']:,.0f}" if "ref_s" in r else f"— ({r['note']})"
        ratios = ("ours_over_bound", "ref_over_bound", "floor_over_bound", "kernel_over_bound", "ours_over_floor")
        bounds = [f"{r[key]:.2f}" if key in r else "—" for key in ratios]
        cells = [r["layer"], r["d"], r["L"], f"{r['ours_tok_s']:,.0f}", reference, speed, *bounds]
        cells += [both(r, "peak_mib", ","), both(r, "faults_per_step", ","), both(r, "system_share", ".0%")]
        cells += [f"{r.get('max_abs_diff', float('nan')):.1e}", f"{100 * r['other_cpu']:.0f}%"]
        rows.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", nargs="+", choices=LAYERS, default=list(LAYERS))
    parser.add_argument("--d", nargs="+", type=int, default=[128, 256])
    parser.add_argument("--L", nargs="+", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5, help="timed (ours, reference) pairs")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--no_memory", "--no-memory", dest="memory", action="store_false", help="skip the peak-RSS subprocesses"
    )
    parser.add_argument("--quick", action="store_true", help="d=128, L=1024, 3 pairs, no memory probes")
    parser.add_argument(
        "--wait_quiet",
        "--wait-quiet",
        type=float,
        default=0.0,
        help="wait up to this many seconds for other processes to go quiet",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="fp32", choices=list(DTYPES), help="bf16 = autocast (kernels stay fp32)")
    parser.add_argument(
        "--recorded_ceilings",
        action="store_true",
        help="the bound from the recorded rates of docs/benchmarks.md's machine instead of this machine's, measured",
    )
    parser.add_argument("--probe", nargs=4, metavar=("LAYER", "D", "L", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        layer, d, length, side = args.probe
        return probe(layer, int(d), int(length), side, args.batch, torch.device(args.device), DTYPES[args.dtype])
    if args.quick:
        args.d, args.L, args.steps, args.memory = [128], [1024], 3, False
    torch.set_num_threads(2)
    if args.device == "cpu":  # CUDA reserves a huge virtual address space: no limit there
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
    env = {k: os.environ.get(k) for k in ("THP_MEM_ALLOC_ENABLE", "OMP_NUM_THREADS", "GLIBC_TUNABLES")}
    if args.device == "cpu" and not args.recorded_ceilings:
        CEILINGS.update(measure_ceilings())
    ceilings = {key: round(value / 1e9, 1) for key, value in CEILINGS.items()}
    head = {"torch": torch.__version__, "threads": torch.get_num_threads(), "env": env}
    print(json.dumps({**head, "ceilings_gflop_s": ceilings, "recorded": args.recorded_ceilings}), flush=True)
    results = []
    for layer in args.layers:
        for d in args.d:
            for length in args.L:
                result = run_one(layer, d, length, args)
                print(json.dumps(result), flush=True)
                results.append(result)
    if args.device == "cpu":
        source = "recorded (docs/benchmarks.md)" if args.recorded_ceilings else "measured on this machine"
        print(
            f"bound: matmul {ceilings['matmul_flops_per_s']} GFLOP/s, FFT {ceilings['fft_flops_per_s']} GFLOP/s, "
            f"{source}"
        )
    print(markdown(results))


if __name__ == "__main__":
    main()
