"""Measuring the machine the benchmark runs on: what it is (`machine_info`), its dense matrix-multiply peak
(`measure_matmul_peak`, what MFU is read against), the memory one step needs above the resting state
(`peak_step_memory_mb`) and interleaved step timing (`time_sides`). The module docstring of engine.bench says how
each is measured."""
import ctypes
import gc
import math
import os
import platform
import threading
import time

import torch

from engine.device import default_precision


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device) -> dict:
    import transformers
    info = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "cpu": _cpu_name(), "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    info["cpu_bf16"] = default_precision(torch.device("cpu")) == "bf16"  # native bf16 units (AVX512-BF16 or AMX)
    if hasattr(os, "getloadavg"):
        info["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_matmul_peak(device, dtype=torch.bfloat16, n: int = 8192, iters: int = 20) -> float:
    """The device's dense matrix-multiply rate in TFLOP/s, measured: the best of `iters` (n x n) @ (n x n)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    best = float("inf")
    for _ in range(iters):
        t = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e12
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # a lower bound without /proc


def _malloc_trim():
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_step_memory_mb(fn, device) -> float:
    """MB that one call of `fn` needs above the resting state (see the module docstring)."""
    gc.collect(0)  # the young generation only: a full collection costs ~0.5 s with transformers loaded
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2 ** 20
    _malloc_trim()
    base = _rss()
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.0005)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        fn()
    finally:
        stop.set()
        th.join()
    return max(0, max(peak[0], _rss()) - base) / 2 ** 20


def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(0.9 * len(xs))) - 1)]


def time_sides(fns: dict, batches, steps: int, warmup: int, device) -> dict:
    """Interleaved timing: {name: (timed step seconds, warm-up step seconds)}. The order flips every step."""
    names = list(fns)
    times = {n: [] for n in names}
    warm = {n: [] for n in names}
    for i in range(warmup + steps):
        order = names if i % 2 == 0 else names[::-1]
        batch = batches[i % len(batches)]
        for n in order:
            sync(device)
            t = time.perf_counter()
            fns[n](batch)
            sync(device)
            (times if i >= warmup else warm)[n].append(time.perf_counter() - t)
    return {n: (times[n], warm[n]) for n in names}
