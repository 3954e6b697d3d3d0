"""Devices, numeric precision and host-to-device copies, shared by pre-training, fine-tuning, features and the
benchmark.

The engine trains in fp32 or under bf16 autocast (fp32 weights, gradients and optimizer state, bf16 matrix
multiplies). `--precision auto` picks bf16 where the hardware has native bf16 units (CUDA with bf16; CPUs with
AVX512-BF16 or AMX), where it measured faster (BENCHMARKS.md), and fp32 elsewhere, where bf16 would be emulated.
"""
import re

import torch

from engine.errors import EngineError

PRECISIONS = ("auto", "fp32", "bf16")  # the --precision choices


def check_device(name: str) -> None:
    """The --device values every command takes: auto, cpu, cuda or cuda:N (EngineError otherwise)."""
    if name not in ("auto", "cpu", "cuda") and not re.fullmatch(r"cuda:\d+", str(name)):
        raise EngineError(f"unknown device '{name}'; choose auto, cpu or cuda")


def resolve_device(name: str, local_rank: int = None) -> torch.device:
    """The device of every command: `auto` is CUDA when present, else CPU; `cuda` is GPU 0, `cuda:N` GPU N, and a
    torchrun rank (`local_rank` given) takes the GPU of its local rank."""
    check_device(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise EngineError(f"--device {name} was asked for but no CUDA GPU is available; use --device cpu or auto")
        return torch.device("cuda", local_rank if local_rank is not None else (torch.device(name).index or 0))
    return torch.device("cpu")


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise EngineError(f"unknown --precision '{precision}'; choose one of {', '.join(PRECISIONS)}")


def default_precision(device) -> str:
    """"bf16" where bf16 autocast is the engine's default (CUDA with bf16 support; CPUs with native bf16
    matrix units, AVX512-BF16 or AMX, where it measured faster), else "fp32"."""
    device = torch.device(device)
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    if device.type == "cpu":
        cpu = getattr(torch, "cpu", None)
        for probe in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
            try:
                if getattr(cpu, probe)():
                    return "bf16"
            except Exception:
                pass
    return "fp32"


def resolve_precision(precision: str, device: torch.device) -> str:
    """"bf16" or "fp32": `auto` becomes `default_precision(device)`; bf16 on a GPU without bf16 is an error."""
    device = torch.device(device)
    check_precision(precision)
    if precision == "auto":
        return default_precision(device)
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise EngineError("--precision bf16 was asked for but this GPU has no bf16 support; use --precision fp32")
    return precision


COMPILES = ("auto", "on", "off")


def check_compile(compile) -> None:
    if compile not in COMPILES:
        raise EngineError(f"unknown --compile '{compile}'; choose one of {', '.join(COMPILES)}")


def default_compile(device) -> bool:
    """Whether `--compile auto` compiles the model: on CUDA where Triton is installed (torch.compile's GPU
    backend), where a BERT-base pre-training step measured faster compiled (BENCHMARKS.md, "Engine vs transformers
    on a GPU": the compiled and eager rows at 128 x 256); not on a CPU, where compiling took minutes and
    gained nothing (docs/lab-notes/engine-vs-transformers-cpu.md)."""
    import importlib.util
    device = torch.device(device)
    return device.type == "cuda" and importlib.util.find_spec("triton") is not None


def resolve_compile(compile, device) -> bool:
    """`--compile` (auto | on | off) -> compile?"""
    check_compile(compile)
    return default_compile(device) if compile == "auto" else compile == "on"


def amp(device, precision: str):
    """bf16 autocast on `device` when `precision` (resolved) is "bf16"; weights, gradients and optimizer stay
    fp32. A disabled context otherwise."""
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16")


def to_device(t: torch.Tensor, device) -> torch.Tensor:
    """Host batch tensor -> device. On CUDA through pinned (page-locked) memory, so the copy is truly
    asynchronous: from pageable memory the host waits for the GPU's queued work before every step and the GPU
    then idles while the next batch is prepared. The training loops have no per-step synchronisation, so batch
    preparation overlaps the previous step's kernels."""
    if torch.device(device).type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)  # already there (the benchmark moves its batches once), or a CPU run
