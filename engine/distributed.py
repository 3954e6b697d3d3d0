"""Data-parallel pre-training under `torchrun`: which process this is, and the process group (its device:
engine.device.resolve_device with the local rank).

Under `torchrun` (env RANK, WORLD_SIZE, LOCAL_RANK) every rank trains on its own slice of each global batch with
DistributedDataParallel (gloo on CPU, NCCL on GPU); gradients are all-reduced once per optimizer step. Rank 0
writes run.json, metrics and checkpoints. Without torchrun this is one process (`Dist()`), and every helper here
does nothing. Under `torchrun --max-restarts N` a worker that dies makes torchrun stop the group and start it again
(`restart_count` > 0): the run continues from its last complete checkpoint by itself; rank 0 writes a checkpoint
between two barriers, so it is complete before any rank can pass it, and torchrun starts the group again only after
every worker of the old one has stopped.
"""
import os
from dataclasses import dataclass

import torch

from engine.errors import EngineError


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self):
        if self.enabled:
            torch.distributed.barrier()


def restart_count() -> int:
    """How many times torchrun has restarted this worker group (`--max-restarts`; TORCHELASTIC_RESTART_COUNT): 0 on
    the first attempt and without torchrun. A restart runs the same command again, so it resumes the run by itself
    (engine.pretraining.run_folder.elastic_restart)."""
    try:
        return max(0, int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0))
    except ValueError:
        return 0


def dist_from_env() -> Dist:
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        return Dist(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)),
                    int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])))
    return Dist()


def setup(dist: Dist, device: torch.device, num_threads) -> None:
    """Start the process group (once), pin the GPU, and share the CPU threads among the local ranks."""
    if dist.enabled and not torch.distributed.is_initialized():
        # imported first on purpose: DDP imports torch.distributed.nn, whose functions take `group=group.WORLD` as a
        # default argument; imported after the group exists, those defaults keep it alive past
        # destroy_process_group, its gloo threads run on into interpreter exit and can abort the process (SIGABRT,
        # "terminate called without an active exception") after a run that finished
        from torch.distributed import nn as _defaults_bound_now  # noqa: F401
        backend = "nccl" if device.type == "cuda" else "gloo"
        store = attempt_store(dist)
        if store is None:
            torch.distributed.init_process_group(backend)
        else:
            torch.distributed.init_process_group(backend, store=store, rank=dist.rank, world_size=dist.world_size)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if num_threads:
        torch.set_num_threads(int(num_threads))
    elif device.type == "cpu" and dist.local_world_size > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // dist.local_world_size))


def attempt_store(dist: Dist):
    """The store of this attempt's process group under torchrun's shared store (TORCHELASTIC_USE_AGENT_STORE=True, the
    default), else None (init_process_group's own). The shared store outlives a restart and still holds the keys of
    the attempt that died: a rank that reads one before the new rank 0 has overwritten it connects to a process that
    is gone, and the restart fails (pytorch/pytorch#135712). Each attempt's keys go under a prefix of their own, its
    restart count, which every rank of one node agrees on. Across nodes the counts may differ (torchrun counts a
    restart only on the nodes whose workers failed), so several nodes with restarts need torch's own opt-out,
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, which gives every attempt a new store."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    if int(os.environ.get("GROUP_WORLD_SIZE") or 1) > 1 and int(os.environ.get("TORCHELASTIC_MAX_RESTARTS") or 0) > 0:
        raise EngineError("torchrun --max-restarts on several nodes needs a new store for each attempt: set "
                          "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment on every node (README, Do research)")
    from torch.distributed.constants import default_pg_timeout
    store = torch.distributed.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), dist.world_size,
                                       is_master=False, timeout=default_pg_timeout)
    return torch.distributed.PrefixStore(f"bert-studio/attempt-{restart_count()}", store)


def group_restart_count(dist: Dist, device) -> int:
    """The highest `restart_count` over the ranks: torchrun counts a restart only on the nodes whose workers failed (a
    node restarted because another one failed counts none), so rank 0's own count may be 0 on a restart."""
    n = torch.tensor([float(restart_count())], device=device)
    all_reduce_(dist, n, op=torch.distributed.ReduceOp.MAX if dist.enabled else None)
    return int(n.item())


def broadcast(dist: Dist, values: list) -> list:
    """Rank 0's `values` (picklable) on every rank."""
    if dist.enabled:
        torch.distributed.broadcast_object_list(values, src=0)
    return values


def all_reduce_(dist: Dist, t: torch.Tensor, op=None) -> torch.Tensor:
    """Sum (or `op`) `t` over the ranks in place; nothing on one process."""
    if dist.enabled:
        torch.distributed.all_reduce(t, **({"op": op} if op is not None else {}))
    return t


def teardown(dist: Dist) -> None:
    if dist.enabled and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
