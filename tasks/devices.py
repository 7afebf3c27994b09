"""The compute devices a spec may name (cpu, cuda, cuda:N, mps): what this host has of them (torch's
CUDA and MPS, ONNX Runtime's CUDA engine), the one-line refusal when a spec names one it lacks, and
the batch size on a GPU. Checked before any work starts (tasks/stages/preflight.py) and again where
a provider is made, so that the Python API gets the same message."""
from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass

DEVICE_PATTERN = re.compile(r"cpu|cuda(:[0-9]+)?|mps")
ORT_CUDA = "CUDAExecutionProvider"


class DeviceUnavailable(RuntimeError):
    """A device (or a backend on it) that this host does not have: an expected failure (one line, exit 2).
    `where` is the spec key it comes from, filled in by the pre-flight."""

    def __init__(self, device: str, why: str, fix: str, where: str = "options.device"):
        super().__init__(device, why, fix, where)  # all of them: the exception survives pickling (Dask)
        self.device, self.why, self.fix, self.where = device, why, fix, where

    def __str__(self) -> str:
        return f"{self.where} is {self.device}, but {self.why}; {self.fix}"

    def at(self, where: str) -> "DeviceUnavailable":
        return DeviceUnavailable(self.device, self.why, self.fix, where)


def checked_device(value: str) -> str:
    """The `device` option's validator: cpu, cuda, cuda:N or mps."""
    if not DEVICE_PATTERN.fullmatch(value):
        raise ValueError(f"expected cpu, cuda, cuda:N or mps (got {value!r})")
    return value


def kind_of(device: str) -> str:
    """"cuda:1" -> "cuda"."""
    return device.partition(":")[0]


def index_of(device: str) -> int:
    return int(device.partition(":")[2] or 0)


def on_gpu(device: str) -> bool:
    return kind_of(device) in ("cuda", "mps")


# Each probe imports its engine only when asked: a spec on the CPU never pays for torch's import here.
def torch_cuda_devices() -> int:
    """CUDA devices torch can use (0 when torch is built without CUDA, or absent)."""
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def torch_mps() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def onnx_engines() -> list[str]:
    """ONNX Runtime's execution providers on this host ([] when it is not installed)."""
    if importlib.util.find_spec("onnxruntime") is None:
        return []
    import onnxruntime

    return list(onnxruntime.get_available_providers())


def host_has() -> str:
    """What this host offers, for a refusal: "torch sees no CUDA or MPS device; ONNX Runtime offers
    CPUExecutionProvider only"."""
    cuda, mps, engines = torch_cuda_devices(), torch_mps(), onnx_engines()
    seen = [f"{cuda} CUDA device{'s' * (cuda != 1)} (cuda:0{f'..cuda:{cuda - 1}' if cuda > 1 else ''})"] if cuda else []
    seen += ["an MPS device"] if mps else []
    torch_part = f"torch sees {' and '.join(seen)}" if seen else "torch sees no CUDA or MPS device"
    if not engines:
        return f"{torch_part}; ONNX Runtime is not installed"
    useful = [e for e in engines if e != "AzureExecutionProvider"]  # Azure's is a remote endpoint, no device
    return f"{torch_part}; ONNX Runtime offers {', '.join(useful)}{' only' if useful == ['CPUExecutionProvider'] else ''}"


def missing_device(device: str) -> DeviceUnavailable | None:
    """Why `device` is not on this host, for any engine (None: torch or ONNX Runtime has it)."""
    kind = kind_of(device)
    if kind == "cpu":
        return None
    fix = f"set device: cpu, or run on a host with {'a CUDA' if kind == 'cuda' else 'an MPS'} device"
    if kind == "mps":
        return None if torch_mps() else DeviceUnavailable(device, f"this host has none ({host_has()})", fix)
    count = torch_cuda_devices()
    if count > index_of(device) or (count == 0 and ORT_CUDA in onnx_engines()):
        # ONNX Runtime alone cannot count devices: an index it lacks fails when its session starts.
        return None
    if count:
        return DeviceUnavailable(device, f"this host has no {device} ({host_has()})",
                                 "use cuda:0" if count == 1 else f"use one of cuda:0..cuda:{count - 1}")
    return DeviceUnavailable(device, f"this host has no CUDA device ({host_has()})", fix)


@dataclass(frozen=True)
class Engine:
    """What computes a provider's vectors: the backend, the device, and why (the manifest's `engines`
    record and the log line before embedding)."""

    backend: str  # torch | onnx | onnx-int8
    device: str  # cpu | cuda | cuda:N | mps
    reason: str

    @property
    def execution_provider(self) -> str | None:
        """ONNX Runtime's engine for the device; None on torch."""
        if self.backend == "torch":
            return None
        return ORT_CUDA if kind_of(self.device) == "cuda" else "CPUExecutionProvider"

    def to_dict(self) -> dict:
        return {"backend": self.backend, "device": self.device, "execution_provider": self.execution_provider,
                "reason": self.reason}

    def described(self) -> str:
        """"backend onnx on cpu (ONNX Runtime, CPUExecutionProvider): auto: ..."."""
        runtime = "torch" if self.backend == "torch" else f"ONNX Runtime, {self.execution_provider}"
        return f"backend {self.backend} on {self.device} ({runtime}): {self.reason}"


# The GPU batch size rule (docs/guide/providers.md). A GPU is fed poorly by the CPU's 64 texts per
# call, and a fixed larger number either wastes a big card or runs a small one out of memory; so
# the batch is sized from what the card has free when embedding starts. Per text, an encoder's
# inference holds about one layer's activations at a time: the attention scores (heads x T x T)
# twice (scores and softmax) and a few hidden-size and one intermediate-size vector per token, in
# float32. That overestimates kernels that never store T x T (flash attention), which is the safe
# side. Half the free memory (after the weights) is the budget: the allocator's fragmentation and
# other processes on the card take the rest. A power of two, from 8 to 1024 (beyond that a batch
# gains nothing measurable and a crash loses more).
GPU_BATCH_MIN, GPU_BATCH_MAX = 8, 1024


def bytes_per_text(tokens: int, heads: int, hidden: int, intermediate: int) -> int:
    return 4 * tokens * (2 * heads * tokens + 4 * hidden + intermediate)


def gpu_batch_size(device: str, per_text: int, weights: int) -> tuple[int, str]:
    """(texts per call, how it was chosen) on a CUDA device, from its free memory now."""
    import torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    budget = max(0, free - weights) // 2
    fits = budget // max(1, per_text)
    batch = min(GPU_BATCH_MAX, max(GPU_BATCH_MIN, 1 << max(0, int(fits).bit_length() - 1)))
    return batch, (f"{batch} texts per call, chosen from {free / 2**30:.1f} GiB free on {device} "
                   f"(half of it after the weights, at ~{per_text / 2**20:.1f} MiB per text)")
