"""model.parametrization=mup under FSDP2 (lab.nn.fsdp.fully_shard_blocks, what trainer=fsdp / fsdp_cpu's strategy
runs in configure_model): two gloo processes in a subprocess, a mup GPT away from its base, sharded, next to the
same model unsharded."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from conftest import ROOT

# Each rank: the mup GPT (width 32, base 16, untied head) sharded as FSDP2Strategy shards it, and unsharded; both
# get the task's optimizer (LanguageModelTask.configure_optimizers: lab.nn.mup's per-parameter lrs as parameter
# groups) and the same batch on both ranks (so FSDP2's averaged gradient is the one-process gradient). Two steps;
# a save and load of the sharded model and optimizer through torch.distributed.checkpoint (as Lightning's
# ModelParallelStrategy saves and resumes); one more step of the original and of the resumed one. Rank 0 writes
# every parameter's (lr, weight decay), sharded and unsharded, and the largest differences.
WORKER = """
import json, os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from lab.models.gpt import GPT
from lab.nn.fsdp import fully_shard_blocks
from lab.tasks.language_model import LanguageModelTask

IDS = torch.randint(1, 50, (2, 12), generator=torch.Generator().manual_seed(0))

def model_and_optimizer(shard):
    torch.manual_seed(0)
    model = GPT(50, d_model=32, n_heads=2, n_layers=2, max_seq_len=12, tie_embeddings=False, parametrization="mup",
                mup_base_width=16)
    if shard:
        fully_shard_blocks(model, init_device_mesh("cpu", (2,)))
    adamw = lambda groups: torch.optim.AdamW(groups, lr=1e-2, weight_decay=0.1)
    opt = LanguageModelTask(model, adamw).configure_optimizers()
    return model, opt

def step(model, opt):
    model(IDS).float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad()

def full(model):
    return {n: p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for n, p in model.named_parameters()}

def lrs(model, opt):
    of = {id(p): (g["lr"], g["weight_decay"]) for g in opt.param_groups for p in g["params"]}
    return {n: of[id(p)] for n, p in model.named_parameters()}

def diff(a, b):
    return max((a[n] - b[n]).abs().max().item() for n in a)

def run(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    (model, opt), (ref, ref_opt) = model_and_optimizer(True), model_and_optimizer(False)
    result = {"sharded": lrs(model, opt), "unsharded": lrs(ref, ref_opt)}
    for _ in range(2):
        step(model, opt), step(ref, ref_opt)
    result["trained"] = diff(full(model), full(ref))
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=out + ".ckpt")
    resumed, resumed_opt = model_and_optimizer(True)
    msd, osd = get_state_dict(resumed, resumed_opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=out + ".ckpt")
    set_state_dict(resumed, resumed_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    result["resumed"] = lrs(resumed, resumed_opt)
    step(model, opt), step(resumed, resumed_opt)
    result["resume"] = diff(full(model), full(resumed))
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(sys.argv[1], sys.argv[2]), nprocs=2)
"""


def test_mup_lrs_survive_fsdp2_sharding_and_its_checkpoint(tmp_path):
    """Every parameter's µP lr and weight decay are the unsharded model's after FSDP2 replaced the parameters
    with DTensors, and after a sharded checkpoint's round trip; the sharded model trains as the unsharded one
    and the resumed one continues it exactly. Hand values: the untied readout's and the hidden matrices' lr is
    1e-2 x 16/32 and their weight decay 0.1 x 2; the embedding's stays 1e-2 and 0.1. Catches a factor lost or
    wrong on the sharded model (tests/mutants_mup.py: the hidden matrices left at sp's lr, the lr divided by the
    factor), a resume that brings back other lrs or another optimizer state, a sharded step that differs from the
    unsharded one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "worker.py").write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(tmp_path / "worker.py"), str(port), str(tmp_path / "out.json")],
                         capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["sharded"] == result["unsharded"] == result["resumed"]
    lr = result["sharded"]
    assert lr["lm_head.weight"] == lr["decoder.layers.0.ffn.down.weight"] == [1e-2 / 2, 0.2]
    assert lr["embed.tokens.weight"] == [1e-2, 0.1]
    assert result["trained"] < 1e-6 and result["resume"] == 0.0
