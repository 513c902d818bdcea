"""Optimizers and learning-rate schedules (schedule configs use them with `_partial_: true`; the task passes the optimizer).

Resuming with another length (trainer.max_steps, hence total_steps) never makes the cosine schedule's learning
rate jump: the schedule keeps its state in the checkpoint and, at the step it resumes from, the cosine decay
restarts from the learning rate reached and ends at min_lr at the new total_steps (WarmupCosine.load_state_dict
says so in one line). A schedule that had already reached min_lr stays there. WarmupStableDecay follows the new
plan (its decay is the last steps of whatever the run's length is) and says so in one line.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from lab.errors import LabError
from lab.nn.roles import MUON_ROLES, Role

log = logging.getLogger("lab")


def linear_warmup(step: int, warmup_steps: int) -> float:
    """The factor at 0-based optimizer step `step` < warmup_steps: 1/warmup at the first step, 1 at the last."""
    return (step + 1) / warmup_steps


class WarmupCosine(LRScheduler):
    """Linear warmup from 0 to each group's lr over warmup_steps, then cosine decay to min_lr at total_steps;
    min_lr after. The decay is one segment, from factor `decay_from` at step `decay_start` (1.0 at warmup_steps
    for a fresh run) to min_lr at total_steps; a resume with another total_steps starts a new segment."""

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0):
        self.warmup_steps, self.total_steps, self.min_lr = int(warmup_steps), int(total_steps), float(min_lr)
        self.decay_start, self.decay_from = self.warmup_steps, 1.0
        super().__init__(optimizer)

    def factor(self, step: int) -> float:
        """lr / the optimizer's lr at `step` (0-based optimizer steps)."""
        if step < self.warmup_steps:
            return linear_warmup(step, self.warmup_steps)
        base = self.base_lrs[0]
        floor = self.min_lr / base if base > 0 else 0.0
        progress = min(1.0, (step - self.decay_start) / max(1, self.total_steps - self.decay_start))
        return floor + (self.decay_from - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    def get_lr(self) -> list[float]:
        return [base * self.factor(self.last_epoch) for base in self.base_lrs]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved schedule; if this run was configured with another total_steps, continue from the
        learning rate reached (see the module docstring) instead of jumping to the new plan's value."""
        planned = self.total_steps
        if "total_steps" not in state_dict:
            log.warning("lr schedule: the checkpoint's scheduler state has no total_steps (written before "
                        "lab.tasks.optim.WarmupCosine); following this run's plan of %d steps", planned)
            state_dict = {k: v for k, v in state_dict.items() if k in ("last_epoch", "base_lrs", "_step_count")}
        super().load_state_dict(state_dict)
        if planned == self.total_steps:
            return
        step, old_total = self.last_epoch, self.total_steps
        if step >= self.warmup_steps:
            self.decay_start, self.decay_from = step, self.factor(step)
        self.total_steps = planned
        lr = self.base_lrs[0] * self.factor(step)
        log.info("lr schedule: total_steps %d -> %d at step %d: the decay continues from lr %.3g to min_lr %.3g "
                 "at step %d (no jump; rule in lab/tasks/optim.py)", old_total, planned, step, lr, self.min_lr, planned)


def warmup_cosine(optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> WarmupCosine:
    """Linear warmup from 0 to each group's lr, then cosine decay to min_lr at total_steps; min_lr after.

    Args:
        warmup_steps: optimizer steps of linear warmup from 0 to the optimizer's lr.
        total_steps: the step at which the cosine decay reaches min_lr (trainer.max_steps); a resume with
            another value continues from the lr reached (module docstring).
        min_lr: the learning rate at and after total_steps.
    """
    return WarmupCosine(optimizer, warmup_steps, total_steps, min_lr)


def inverse_sqrt(optimizer: Optimizer, warmup_steps: int) -> LambdaLR:
    """Vaswani et al. 5.3: linear warmup, then lr * sqrt(warmup / step). It has no end, so a longer run simply
    continues it.

    Args:
        warmup_steps: optimizer steps of linear warmup to the optimizer's lr, and the decay's time scale.
    """
    return LambdaLR(optimizer, lambda step: min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1))))


class WarmupStableDecay(LRScheduler):
    """Warmup-stable-decay (Hu et al. 2024, "MiniCPM"; modded-nanogpt's schedule): linear warmup from 0 to each
    group's lr over warmup_steps, the full lr until the last `decay_fraction` of total_steps, then a linear decay
    to min_lr at total_steps; min_lr after. As in WarmupCosine, min_lr is the first group's; every group ends at
    the same fraction of its own lr (MuonAdamW's Muon and AdamW lrs differ by 20x)."""

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0,
                 decay_fraction: float = 0.2):
        if not 0.0 < decay_fraction <= 1.0:
            raise LabError(f"task.scheduler.decay_fraction must be in (0, 1], got {decay_fraction}; "
                           "e.g. task.scheduler.decay_fraction=0.2")
        self.warmup_steps, self.total_steps = int(warmup_steps), int(total_steps)
        self.min_lr, self.decay_fraction = float(min_lr), float(decay_fraction)
        super().__init__(optimizer)

    def factor(self, step: int) -> float:
        """lr / the optimizer's lr at `step` (0-based optimizer steps)."""
        if step < self.warmup_steps:
            return linear_warmup(step, self.warmup_steps)
        base = self.base_lrs[0]
        floor = self.min_lr / base if base > 0 else 0.0
        decay_steps = max(1, round(self.decay_fraction * self.total_steps))
        progress = min(1.0, max(0.0, (step - (self.total_steps - decay_steps)) / decay_steps))
        return 1.0 + (floor - 1.0) * progress

    def get_lr(self) -> list[float]:
        return [base * self.factor(self.last_epoch) for base in self.base_lrs]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved schedule; a run configured with another total_steps follows its own plan, which moves
        the decay: one line says so, with the lr factor before and after (a jump only if the decay had begun)."""
        planned = self.total_steps
        super().load_state_dict(state_dict)
        if planned != self.total_steps:
            step, before = self.last_epoch, self.factor(self.last_epoch)
            old, self.total_steps = self.total_steps, planned
            log.info("lr schedule: total_steps %d -> %d at step %d: the decay moves to the new plan's last %d steps; "
                     "lr factor %.3g -> %.3g", old, planned, step, max(1, round(self.decay_fraction * planned)),
                     before, self.factor(step))


def warmup_stable_decay(optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0,
                        decay_fraction: float = 0.2) -> WarmupStableDecay:
    """Linear warmup to each group's lr, constant, then a linear decay to min_lr over the last steps (WSD).

    Args:
        warmup_steps: optimizer steps of linear warmup from 0 to the optimizer's lr.
        total_steps: the step at which the decay reaches min_lr (trainer.max_steps).
        min_lr: the learning rate at and after total_steps (of the first parameter group; the others end at
            the same fraction of their lr).
        decay_fraction: share of total_steps, at the end, over which the lr decays linearly.
    """
    return WarmupStableDecay(optimizer, warmup_steps, total_steps, min_lr, decay_fraction)


def parametrized_groups(groups: list[dict], lr_scales: Mapping[torch.Tensor, float]) -> list[dict]:
    """model.parametrization's per-parameter learning rates as parameter groups: each group split by its
    parameters' factor (lab.nn.mup.Scale.lr), the factor-1 part first and unmarked (under sp and at the µP base:
    the groups as given, the same objects), every other part marked `lr_scale`, which apply_lr_scales turns
    into the group's lr once the optimizer has filled in its defaults."""
    out = []
    for g in groups:
        by_scale: dict[float, list[torch.Tensor]] = {}
        for p in g["params"]:
            by_scale.setdefault(lr_scales[p], []).append(p)
        if set(by_scale) <= {1.0}:
            out.append(g)
            continue
        rest = {k: v for k, v in g.items() if k != "params"}
        out += [{**rest, "params": ps, **({"lr_scale": s} if s != 1.0 else {})}
                for s, ps in sorted(by_scale.items(), key=lambda item: item[0] != 1.0)]
    return out


def apply_lr_scales(optimizer: Optimizer) -> None:
    """Each group marked by parametrized_groups: lr x lr_scale and weight_decay / lr_scale (AdamW's decay per step,
    lr x weight_decay, stays the base's, as mup.MuAdamW keeps it). MuonAdamW gives its Muon groups no mark
    (lab.nn.mup says why). Run once, right after the optimizer is built and before the schedule reads its lrs;
    a resumed optimizer brings the scaled values in its state."""
    for g in optimizer.param_groups:
        scale = g.pop("lr_scale", 1.0)
        if scale != 1.0:
            g["lr"] *= scale
            g["weight_decay"] /= scale


NS_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
"""Newton-Schulz's compute dtypes (MuonAdamW's ns_dtype)."""


def newton_schulz(x: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
                  dtype: torch.dtype) -> torch.Tensor:
    """torch.optim.Muon's quintic Newton-Schulz iteration (its coefficients, its normalisation by the Frobenius
    norm clamped at eps, the wide orientation), on a stack [N, A, B]: each of the N matrices on its own, in
    `dtype`; returned in `dtype`."""
    a, b, c = coefficients
    y = x.to(dtype)
    tall = x.size(-2) > x.size(-1)
    if tall:
        y = y.mT
    y = y / torch.linalg.vector_norm(y, dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = y @ y.mT
        y = torch.baddbmm(y, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), y, beta=a)
    return y.mT if tall else y


def adjusted_lr(lr: float, adjust_lr_fn: str | None, rows: int, cols: int) -> float:
    """torch.optim.Muon's learning-rate adjustment for one [rows, cols] matrix (an expert's own, not its stack)."""
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    return lr


def shard_rows(rows: int, ranks: int) -> list[int]:
    """How many of a matrix's `rows` each of `ranks` ranks holds under DTensor's Shard(0) (FSDP2's layout):
    torch.chunk's rule, ceil(rows / ranks) each in rank order, the last ones short or empty."""
    chunk = -(-rows // ranks)
    return [max(0, min(chunk, rows - r * chunk)) for r in range(ranks)]


def buckets(sizes: list[int], cap: float | None) -> list[list[int]]:
    """Distributed Muon's buckets: the indices of `sizes` (bytes, in parameter order) cut into runs of at most `cap`
    bytes (None: one run), a size over the cap a run of its own."""
    runs: list[list[int]] = []
    total = 0
    for j, size in enumerate(sizes):
        if not runs or (cap is not None and total + size > cap):
            runs.append([])
            total = 0
        runs[-1].append(j)
        total += size
    return runs


def row_sharded(t: torch.Tensor) -> bool:
    """A DTensor in FSDP2's default layout: rows split over a 1-D mesh (Shard(0))."""
    return isinstance(t, DTensor) and t.device_mesh.ndim == 1 and t.placements == (Shard(0),)


class BatchedMuon(Optimizer):
    """torch.optim.Muon with one stacked Newton-Schulz per matrix shape: its group keys, its defaults, its state
    (`momentum_buffer` per parameter) and its update, so a checkpoint of one resumes in the other; it also takes
    3-D stacks [E, out, in] (MoE experts), each expert's matrix orthogonalised and its learning rate adjusted on
    its own. Stacks gather the matrices of one shape across groups with the same Newton-Schulz settings.

    Under FSDP2 (DTensor shards of rows over a 1-D mesh) the ranks share the work, as Moonlight's distributed Muon
    and modded-nanogpt do: each matrix has one owner rank (the largest first, each to the least loaded rank); one
    all-to-all per bucket (the matrices of one mesh and dtype, in parameter order, at most bucket_mb MiB of whole
    matrices when given) sends every shard to its matrix's owner, each owner orthogonalises its whole matrices, and
    a second all-to-all sends each rank its shard of the results: two collectives per bucket and step, whatever the
    number of matrices. The buckets are pipelined: the next bucket's shards travel while one is orthogonalised (and
    its results travel back while the next is), so an owner holds at most two buckets' matrices at a time. An expert
    stack's shard holds whole experts (FSDP2 splits the expert dimension), so each rank orthogonalises its own
    experts with no collective. Any other DTensor layout is gathered whole (one all-gather per matrix) and
    orthogonalised on every rank.

    ns_dtype: Newton-Schulz's compute dtype (torch.optim.Muon's is bfloat16). bucket_mb: the cap on a bucket
    (None: one bucket per mesh and dtype); a matrix larger than the cap is a bucket of its own."""

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1, momentum: float = 0.95,
                 nesterov: bool = True, ns_coefficients: tuple[float, float, float] = (3.4445, -4.7750, 2.0315),
                 eps: float = 1e-7, ns_steps: int = 5, adjust_lr_fn: str | None = None,
                 ns_dtype: torch.dtype = torch.bfloat16, bucket_mb: float | None = None):
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise LabError(f"task.optimizer.adjust_lr_fn must be null, original or match_rms_adamw, got {adjust_lr_fn}")
        defaults = {"lr": lr, "weight_decay": weight_decay, "momentum": momentum, "nesterov": nesterov,
                    "ns_coefficients": ns_coefficients, "eps": eps, "ns_steps": ns_steps, "adjust_lr_fn": adjust_lr_fn}
        super().__init__(params, defaults)
        # how, not what: not group keys, so checkpoints keep torch.optim.Muon's layout
        self.ns_dtype = ns_dtype
        self.bucket_bytes = None if bucket_mb is None else bucket_mb * 2**20  # MiB, as DDP's bucket_cap_mb
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim not in (2, 3):
                    raise ValueError(f"Muon takes matrices and stacks of matrices, not a parameter of size {tuple(p.shape)}")

    def _orthogonalise(self, items: list[tuple[torch.Tensor, dict]]) -> list[torch.Tensor]:
        """Newton-Schulz of each (matrix or stack [E, out, in], group), one stacked call per shape and setting;
        the results in the order given, each in its input's shape."""
        stacks: dict[tuple, list[int]] = {}
        for i, (u, group) in enumerate(items):
            key = (tuple(u.shape[-2:]), u.device, tuple(group["ns_coefficients"]), group["ns_steps"], group["eps"])
            stacks.setdefault(key, []).append(i)
        out: list[torch.Tensor] = [torch.empty(0)] * len(items)
        for (shape, _, coefficients, steps, eps), members in stacks.items():
            counts = [items[i][0].numel() // (shape[0] * shape[1]) for i in members]
            stack = torch.cat([items[i][0].reshape(n, *shape) for i, n in zip(members, counts, strict=True)])
            # back to the updates' dtype and layout in one kernel per stack: the parameters' add_ then needs no
            # casting, and reads a tall matrix's update in its own row order (not strided as Newton-Schulz's wide
            # orientation leaves it)
            ortho = newton_schulz(stack, coefficients, steps, eps, self.ns_dtype).to(
                stack.dtype, memory_format=torch.contiguous_format)
            for i, o in zip(members, ortho.split(counts), strict=True):
                out[i] = o.reshape(items[i][0].shape)
        return out

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        members: list[tuple[torch.Tensor, torch.Tensor, dict]] = []
        for group in self.param_groups:
            momentum = group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - momentum)
                update = p.grad.lerp(buf, momentum) if group["nesterov"] else buf
                members.append((p, update, group))
        # what each rank orthogonalises: local matrices and expert shards, gathered matrices, and the matrices it owns
        local: list[tuple[torch.Tensor, dict]] = []
        sharded: dict[tuple, list[int]] = {}
        for i, (_, u, group) in enumerate(members):
            if row_sharded(u) and u.ndim == 2:
                sharded.setdefault((u.device_mesh, u.dtype), []).append(i)
            elif row_sharded(u) or not isinstance(u, DTensor):
                local.append((u.to_local() if isinstance(u, DTensor) else u, group))
            else:
                local.append((u.full_tensor(), group))  # other layouts: whole on every rank, one all-gather
        results: dict[int, torch.Tensor] = {}
        returning: list[dict] = []  # the buckets' second all-to-alls, started
        for indices in sharded.values():
            owner = self._owners(members, indices)
            sizes = [members[i][1].numel() * members[i][1].element_size() for i in indices]
            runs = [[indices[j] for j in bucket] for bucket in buckets(sizes, self.bucket_bytes)]
            # pipelined: bucket k+1's shards travel while bucket k is orthogonalised, and bucket k's results travel
            # back while the next one is; every rank issues the collectives in the same order
            sending = self._send_to_owners(members, runs[0], owner)
            for k in range(len(runs)):
                ex = self._received(sending)
                if k + 1 < len(runs):
                    sending = self._send_to_owners(members, runs[k + 1], owner)
                ortho = self._orthogonalise([(full, members[i][2]) for i, full in ex["owned"]])
                returning.append(self._return_to_shards(members, ex, ortho))
        ortho_local = iter(self._orthogonalise(local))  # while the last buckets' results travel back
        for back in returning:
            results.update(self._returned(back))
        for i, (p, u, group) in enumerate(members):
            o = results[i] if i in results else next(ortho_local)
            if isinstance(u, DTensor) and not row_sharded(u):
                o = DTensor.from_local(o, u.device_mesh, [Replicate()] * u.device_mesh.ndim,
                                       run_check=False).redistribute(u.device_mesh, u.placements).to_local()
            w = p.to_local() if isinstance(p, DTensor) else p
            lr = group["lr"]
            if group["weight_decay"]:  # a factor of 1 would change nothing and cost a pass over the matrix
                w.mul_(1 - lr * group["weight_decay"])
            w.add_(o, alpha=-adjusted_lr(lr, group["adjust_lr_fn"], *p.shape[-2:]))
        return loss

    @staticmethod
    def _owners(members: list[tuple[torch.Tensor, torch.Tensor, dict]], indices: list[int]) -> dict[int, int]:
        """Each row-sharded matrix's owner rank, planned over all the matrices of a mesh (not bucket by bucket, so
        the buckets share the work too): the largest first, each to the least loaded rank."""
        ranks = members[indices[0]][1].device_mesh.size()
        load, owner = [0] * ranks, {}
        for i in sorted(indices, key=lambda i: -members[i][1].numel()):  # the same plan on every rank
            owner[i] = min(range(ranks), key=lambda r: load[r])
            load[owner[i]] += members[i][1].numel()
        return owner

    @staticmethod
    def _send_to_owners(members: list[tuple[torch.Tensor, torch.Tensor, dict]], indices: list[int],
                        owner: dict[int, int]) -> dict:
        """One bucket's first all-to-all, started: each row-sharded matrix's shards to its owner rank
        (_received waits for them and returns them as whole matrices)."""
        mesh = members[indices[0]][1].device_mesh
        group, ranks, me = mesh.get_group(), mesh.size(), mesh.get_local_rank()
        rows = {i: shard_rows(members[i][1].shape[0], ranks) for i in indices}
        for i in indices:
            if members[i][1].to_local().shape[0] != rows[i][me]:
                raise LabError(f"Muon: a shard of {tuple(members[i][1].shape)} has {members[i][1].to_local().shape[0]} "
                               f"rows on rank {me}, not the {rows[i][me]} of DTensor's Shard(0)")
        cols = {i: members[i][1].shape[1] for i in indices}
        by_owner = [[i for i in indices if owner[i] == r] for r in range(ranks)]
        send = torch.cat([members[i][1].to_local().reshape(-1) for r in range(ranks) for i in by_owner[r]])
        send_splits = [sum(rows[i][me] * cols[i] for i in by_owner[r]) for r in range(ranks)]
        recv_splits = [sum(rows[i][r] * cols[i] for i in by_owner[me]) for r in range(ranks)]
        recv = send.new_empty(sum(recv_splits))
        work = torch.distributed.all_to_all_single(recv, send, recv_splits, send_splits, group=group, async_op=True)
        return {"group": group, "ranks": ranks, "me": me, "rows": rows, "cols": cols, "by_owner": by_owner,
                "send_splits": send_splits, "recv_splits": recv_splits, "work": work, "send": send, "recv": recv}

    @staticmethod
    def _received(ex: dict) -> dict:
        """Wait for a bucket's first all-to-all; ex with "owned": [(member index, whole matrix)] of this rank."""
        ex["work"].wait()
        ranks, me, rows, cols, by_owner = ex["ranks"], ex["me"], ex["rows"], ex["cols"], ex["by_owner"]
        pieces = iter(ex["recv"].split([rows[i][r] * cols[i] for r in range(ranks) for i in by_owner[me]]))
        parts = {i: [] for i in by_owner[me]}
        for _ in range(ranks):
            for i in by_owner[me]:
                parts[i].append(next(pieces).reshape(-1, cols[i]))
        return {**ex, "owned": [(i, torch.cat(parts[i])) for i in by_owner[me]]}

    @staticmethod
    def _return_to_shards(members: list[tuple[torch.Tensor, torch.Tensor, dict]], ex: dict,
                          ortho: list[torch.Tensor]) -> dict:
        """The bucket's second all-to-all, the first one reversed, started: each owner's results, cut into the
        ranks' rows (_returned waits for this rank's shards)."""
        ranks, me, rows, by_owner = ex["ranks"], ex["me"], ex["rows"], ex["by_owner"]
        cuts = {i: o.split(rows[i]) for (i, _), o in zip(ex["owned"], ortho, strict=True)}
        empty = members[next(iter(rows))][1].to_local().new_empty(0)  # for a rank that owns none of the bucket
        send = torch.cat([empty, *(cuts[i][r].reshape(-1).to(empty.dtype) for r in range(ranks) for i in by_owner[me])])
        recv = send.new_empty(sum(ex["send_splits"]))
        work = torch.distributed.all_to_all_single(recv, send, ex["send_splits"], ex["recv_splits"], group=ex["group"],
                                                   async_op=True)
        return {**ex, "work": work, "send": send, "recv": recv}

    @staticmethod
    def _returned(back: dict) -> dict[int, torch.Tensor]:
        """Wait for a bucket's second all-to-all: this rank's shard of every matrix in the bucket, by member index."""
        back["work"].wait()
        ranks, me, rows, cols, by_owner = back["ranks"], back["me"], back["rows"], back["cols"], back["by_owner"]
        pieces = iter(back["recv"].split([rows[i][me] * cols[i] for r in range(ranks) for i in by_owner[r]]))
        return {i: next(pieces).reshape(rows[i][me], cols[i]) for r in range(ranks) for i in by_owner[r]}


class MuonAdamW(Optimizer):
    """Muon (BatchedMuon: torch.optim.Muon's update, one Newton-Schulz per matrix shape) for the hidden matrices,
    AdamW for everything else, as one optimizer: one state, one checkpoint entry, one list of param_groups that
    the schedule scales (Muon's groups first).

    The split is Muon's documented one: Muon orthogonalises the updates of the hidden layers' matrices, read from
    `roles`, {parameter: Role}, which lab.tasks.base.Task passes from the model's parameter_roles:
    lab.nn.roles.MUON_ROLES, i.e. the attention and FFN projections inside lab.nn Blocks, MoE routers, and the
    routed experts' stacked matrices [E, out, in], each expert's matrix orthogonalised (and its learning rate
    adjusted) on its own. Embeddings, output heads, norm gains and biases (experts' stacked biases too) train with
    AdamW. The task passes its two weight-decay groups; each is split again, so the Muon and AdamW parts keep the
    task's no-decay rule.

    lr, betas, eps, weight_decay are AdamW's (the names a task's AdamW config already has, so `task/optimizer=muon`
    keeps them), and fused (torch.optim.AdamW's: one kernel for all its tensors on a GPU; None: torch's choice);
    muon_lr, momentum, nesterov, ns_steps, adjust_lr_fn, muon_weight_decay are Muon's, ns_dtype its Newton-Schulz
    compute dtype: bfloat16 (torch.optim.Muon's, the default) or float32, muon_bucket_mb the cap on distributed
    Muon's buckets under FSDP2 (BatchedMuon's bucket_mb); muon_experts=False gives the experts' stacked matrices to
    AdamW instead (with the task's lr and weight decay), to measure what Muon on experts changes.
    """

    def __init__(self, params, roles: Mapping[torch.Tensor, Role], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                 weight_decay: float = 0.0, muon_lr: float = 0.02, momentum: float = 0.95, nesterov: bool = True,
                 ns_steps: int = 5, adjust_lr_fn: str | None = None, muon_weight_decay: float = 0.0,
                 fused: bool | None = None, ns_dtype: str = "bfloat16", muon_experts: bool = True,
                 muon_bucket_mb: float | None = None):
        if ns_dtype not in NS_DTYPES:
            raise LabError(f"task.optimizer.ns_dtype must be one of {', '.join(NS_DTYPES)}, got {ns_dtype}; "
                           "e.g. task.optimizer.ns_dtype=float32")
        groups = [g if isinstance(g, dict) else {"params": [g]} for g in params]
        muon_roles = MUON_ROLES if muon_experts else MUON_ROLES - {Role.EXPERT}
        muon_groups, adamw_groups = [], []
        for g in groups:
            rest = {k: v for k, v in g.items() if k != "params"}
            decays = rest.get("weight_decay", weight_decay) != 0.0
            hidden = [p for p in g["params"] if roles[p] in muon_roles]
            others = [p for p in g["params"] if roles[p] not in muon_roles]
            # no empty groups: torch.distributed.checkpoint (FSDP2) maps a saved group to this one's by its params
            if hidden:
                muon_groups.append({"params": hidden, "weight_decay": muon_weight_decay if decays else 0.0})
            if others:
                adamw_groups.append({"params": others, **rest})
        if not muon_groups:
            raise LabError("task.optimizer: MuonAdamW found no hidden matrices (the matrices inside lab.nn Blocks) to "
                           "give Muon; drop +task/optimizer=muon so that AdamW trains this model")
        self.muon = BatchedMuon(muon_groups, lr=muon_lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                                adjust_lr_fn=adjust_lr_fn, weight_decay=muon_weight_decay, ns_dtype=NS_DTYPES[ns_dtype],
                                bucket_mb=muon_bucket_mb)
        self.adamw = torch.optim.AdamW(adamw_groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                       fused=fused)
        # the inner optimizers' own group dicts: a schedule that scales self.param_groups scales theirs
        super().__init__(self.muon.param_groups + self.adamw.param_groups, {})
        self._share()

        def split(groups: list[dict]) -> tuple[int, int, str]:  # tensors, parameters, weight decay per group
            return (sum(len(g["params"]) for g in groups), sum(p.numel() for g in groups for p in g["params"]),
                    "/".join(f"{g['weight_decay']:g}" for g in groups))

        log.info("optimizer: Muon (lr %g, momentum %g) on %d hidden matrices%s (%d params; weight decay %s); AdamW "
                 "(lr %g) on %d embedding/head/norm/bias tensors (%d params; weight decay %s)", muon_lr, momentum,
                 split(self.muon.param_groups)[0], " and expert stacks" if muon_experts else "",
                 *split(self.muon.param_groups)[1:], lr, *split(self.adamw.param_groups))
        if experts := [p for g in adamw_groups for p in g["params"] if roles[p] is Role.EXPERT]:
            log.info("optimizer: the %d expert stacks (%d params) train with AdamW, not Muon (task.optimizer.muon_experts=false)",
                     len(experts), sum(p.numel() for p in experts))

    def _share(self) -> None:
        """Point the inner optimizers at this one's groups and state (after construction and after a load)."""
        n = len(self.muon.param_groups)
        self.muon.param_groups, self.adamw.param_groups = self.param_groups[:n], self.param_groups[n:]
        self.muon.state = self.adamw.state = self.state  # disjoint parameters: one dict holds both

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)  # replaces self.state and self.param_groups with new objects
        self._share()

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss
