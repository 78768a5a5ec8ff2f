"""What the benchmark scripts share: the dtype names of `--dtype`, reading this process's memory from /proc."""

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # bf16 = autocast; parameters stay fp32


def status_mib(field: str) -> float:
    """A memory field of /proc/self/status in MiB: VmRSS (now) or VmHWM (peak). VmHWM, not `ru_maxrss`: Linux carries
    the parent's peak RSS over fork + exec into a child's `ru_maxrss`, so a probe process would report its parent's."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(f"{field} is not in /proc/self/status")
