"""How a run is launched: the global rank is known before anything is written (two nodes by NODE_RANK on
loopback), an FSDP sharded checkpoint resumes without FSDP, and "every N steps" counts optimizer steps."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch
from conftest import CACHE_DIR, ROOT, TINY_LM, metric_by_step, read_metrics, run_dirs, train

from lab.runtime.rundir.ranks import global_rank

SHORT = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check_interval"))]


@pytest.mark.parametrize("env,devices,rank", [
    ({}, 1, 0),
    ({"NODE_RANK": "1"}, 1, 1),  # the manual multi-node launch: node 1 of 2, one process each
    ({"NODE_RANK": "1", "LOCAL_RANK": "1"}, 2, 3),  # Lightning's launcher on node 1: its second process
    ({"GROUP_RANK": "2"}, 4, 8),
    ({"RANK": "5", "LOCAL_RANK": "1", "GROUP_RANK": "2", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2",
      "TORCHELASTIC_RUN_ID": "x", "NODE_RANK": "0"}, 2, 5),  # torchrun wins over NODE_RANK
    ({"SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_JOB_NAME": "x",
      "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS_PER_NODE": "2"}, 2, 3),  # srun
], ids=["single", "node-rank", "node-rank-local", "group-rank", "torchrun", "slurm"])
def test_global_rank_from_each_launcher(monkeypatch, env, devices, rank):
    for key in list(os.environ):
        if key.startswith(("SLURM_", "TORCHELASTIC", "LSB_", "JSM_")) or key in ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert global_rank(devices) == rank


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_by_node_rank_write_one_run(tmp_path):
    """Lightning's documented launch for a general cluster, on loopback: two processes, NODE_RANK 0 and 1,
    trainer.num_nodes=2, one device each, the default (timestamped) run directory. Node 1 writes no run
    directory, config.yaml, W&B run or log lines of its own; rank 0's run holds the 6 steps."""
    args = [*SHORT, "trainer=ddp_cpu", "trainer.devices=1", "trainer.num_nodes=2", "trainer.max_steps=6",
            "trainer.val_check_interval=6", "data.batch_size=12", "test=false", "logger.wandb.mode=offline"]
    runs, scratch = tmp_path / "runs", tmp_path / "node1-tmp"
    scratch.mkdir()
    port = str(free_port())
    procs = []
    for node in (0, 1):
        env = {**os.environ, "LAB_RUNS_DIR": str(runs), "PYTHONUNBUFFERED": "1", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "NODE_RANK": str(node), "WANDB_API_KEY": "", "HOME": str(tmp_path),
               "LAB_CACHE_DIR": CACHE_DIR, **({"TMPDIR": str(scratch)} if node else {})}
        procs.append(subprocess.Popen([sys.executable, "-m", "lab.train", *args], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=400) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"{out[-2000:]}\n{err[-3000:]}"
    (run,) = run_dirs(runs)  # node 1 made no run directory of its own
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6
    assert len(list((run / "wandb").glob("offline-run-*"))) == 1
    node1 = outs[1][0] + outs[1][1]
    for rank0_only in ("├── trainer", "setup took", "GPU available", "parameters:"):
        assert rank0_only in outs[0][0] + outs[0][1] and rank0_only not in node1, rank0_only
    leftovers = [p for p in scratch.rglob("*") if p.name in ("config.yaml", "wandb", "metrics.csv", "checkpoints")
                 and ".hydra" not in p.parts]  # Hydra's own record of the job, in the scratch dir
    assert not leftovers, f"node 1 wrote {leftovers}"
    log = (run / "train.log").read_text().splitlines()
    assert sum("setup took" in line for line in log) == 1


@pytest.mark.slow
def test_sharded_fsdp_checkpoint_resumes_in_a_run_without_fsdp(tmp_path):
    """An FSDP run keeps its step-6 sharded directory; a single-process run resumes from it (consolidated on
    the fly, said in one line) and ends at the FSDP run's validation loss (same data, optimizer, schedule)."""
    equiv = [*SHORT, "trainer.max_steps=12", "trainer.val_check_interval=6", "test=false", "callbacks.progress=null"]
    train([*equiv, "trainer=fsdp_cpu", "callbacks.checkpoint.save_top_k=-1"], tmp_path / "a")
    (run_a,) = run_dirs(tmp_path / "a")
    sharded = run_a / "checkpoints" / "best-step6.ckpt"
    assert sharded.is_dir()
    result = train([*equiv, f"ckpt_path={sharded}"], tmp_path / "b")
    (run_b,) = run_dirs(tmp_path / "b")
    a, b = metric_by_step(read_metrics(run_a), "val/loss"), metric_by_step(read_metrics(run_b), "val/loss")
    assert sorted(b) == [11] and b[11] == pytest.approx(a[11], rel=1e-4)  # tolerance: see test_strategies.TOLERANCE
    assert "is FSDP-sharded and this run does not shard: consolidated" in result.stdout
    assert not list(run_b.rglob("lab-consolidated-*")), "the temporary consolidated file was left behind"


def test_val_check_interval_counts_optimizer_steps_with_accumulation(tmp_path):
    """8 optimizer steps of 2 micro-batches, val_check_interval=2: 4 validations (Lightning alone: 8)."""
    train([*SHORT, "trainer.max_steps=8", "trainer.val_check_interval=2", "trainer.accumulate_grad_batches=2",
           "test=false", "callbacks.progress=null"], tmp_path)
    (run,) = run_dirs(tmp_path)
    assert sorted(metric_by_step(read_metrics(run), "val/loss")) == [1, 3, 5, 7]
