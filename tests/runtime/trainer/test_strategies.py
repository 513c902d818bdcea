"""Trainer strategies: every config composes and is validated; impossible combinations are refused with one
clear message; DDP/FSDP on 2 CPU processes match the single process (slow: multi-process, in subprocesses)."""
from __future__ import annotations

import pytest
import torch
from conftest import ROOT, TINY_LM, metric_by_step, read_metrics, run_dirs, run_module, train

from lab.errors import LabError
from lab.runtime.trainer.strategies import FSDP2Strategy, check_trainer

GPU_CONFIGS = ["gpu", "ddp", "fsdp", "deepspeed"]


@pytest.fixture
def pretend_cuda(monkeypatch):
    """Validation as it runs on a GPU machine (this one has none)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.mark.parametrize("trainer", GPU_CONFIGS)
def test_gpu_configs_are_refused_on_a_cpu_machine_with_the_cpu_alternative(compose, trainer):
    cfg = compose(["+experiment=gpt_nano_char", f"trainer={trainer}"])
    assert cfg.trainer.precision == "bf16-mixed"
    with pytest.raises(LabError, match="ddp_cpu"):
        check_trainer(cfg)


@pytest.mark.parametrize("trainer", ["gpu", "ddp", "fsdp"])
def test_gpu_configs_validate_on_a_gpu_machine(compose, pretend_cuda, trainer):
    check_trainer(compose(["+experiment=gpt2_small_gpu", f"trainer={trainer}"]))


def test_deepspeed_config_names_real_zero_arguments_and_asks_for_the_package(compose, pretend_cuda):
    import importlib.util

    cfg = compose(["+experiment=gpt2_small_gpu", "trainer=deepspeed", "trainer.strategy.stage=3"])
    if importlib.util.find_spec("deepspeed") is None:
        with pytest.raises(LabError, match="pip install deepspeed"):
            check_trainer(cfg)  # the argument names were checked against DeepSpeedStrategy before this
    else:
        check_trainer(cfg)
    bad = compose(["+experiment=gpt2_small_gpu", "trainer=deepspeed", "+trainer.strategy.zero_stage=3"])
    with pytest.raises(LabError, match="no argument.*zero_stage"):
        check_trainer(bad)


def test_fsdp_config_builds_the_fsdp2_strategy_with_mixed_precision(compose):
    from hydra.utils import instantiate

    cfg = compose(["+experiment=gpt2_small_gpu", "trainer=fsdp", "trainer.strategy.activation_checkpointing=true", "compile=true"])
    strategy = instantiate(cfg.trainer.strategy)
    assert isinstance(strategy, FSDP2Strategy)
    assert strategy.fsdp_settings == {"param_dtype": "bfloat16", "reduce_dtype": "float32",
                                      "activation_checkpointing": True, "compile_blocks": True}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["trainer=deepspeed", "trainer.accelerator=cpu"], "DeepSpeed.*CPU"),
        (["trainer=fsdp_cpu", "trainer.precision=16-mixed"], "float16 autocast needs a CUDA GPU"),
        (["trainer=ddp_cpu", "trainer.precision=16-mixed"], "float16 autocast needs a CUDA GPU"),
        (["trainer=fsdp_cpu", "+trainer.gradient_clip_algorithm=value"], "gradient_clip_algorithm=value"),
        (["trainer=fsdp_cpu", "+trainer.strategy.shard_size=2"], "FSDP2Strategy has no argument.*shard_size"),
        (["trainer.precision=bf16-mixed", "+task.optimizer.fused=true"], "fused=true cannot be combined with trainer.gradient_clip_val=1.0"),
    ],
    ids=["deepspeed-on-cpu", "fsdp-fp16-on-cpu", "ddp-fp16-on-cpu", "fsdp-clip-by-value", "fsdp-unknown-argument",
         "fused-adamw-clipped-under-autocast"],
)
def test_impossible_combinations_are_refused(compose, overrides, message):
    with pytest.raises(LabError, match=message):
        check_trainer(compose(["+experiment=gpt_nano_char", *overrides]))


@pytest.mark.parametrize("overrides", [
    ["trainer.precision=bf16-mixed", "+task.optimizer.fused=true", "trainer.gradient_clip_val=null"],
    ["trainer.precision=32-true", "+task.optimizer.fused=true"],
    ["trainer.precision=bf16-mixed", "+task/optimizer=muon", "+task.optimizer.fused=true"],  # its own step: clipped
], ids=["fused-unclipped", "fused-fp32", "muon-adamw-fused"])
def test_fused_optimizers_that_lightning_clips_or_that_are_not_clipped_pass(compose, overrides):
    check_trainer(compose(["+experiment=gpt_nano_char", *overrides]))


def test_fsdp_refuses_fp16_even_on_gpu(compose, pretend_cuda):
    with pytest.raises(LabError, match="not supported with FSDP2"):
        check_trainer(compose(["+experiment=gpt2_small_gpu", "trainer=fsdp", "trainer.precision=16-mixed"]))


def test_deepspeed_on_cpu_is_one_line_from_the_cli_not_a_traceback(tmp_path):
    result = run_module("lab.train", [*TINY_LM, "trainer=deepspeed", "trainer.accelerator=cpu"], tmp_path, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "error: trainer=deepspeed runs on CUDA GPUs only" in result.stderr
    assert not run_dirs(tmp_path)  # refused before any run directory or process was made


def test_slurm_launcher_takes_its_shape_from_the_trainer(compose):
    cfg = compose(["+experiment=gpt2_small_gpu", "trainer=ddp", "trainer.devices=8", "trainer.num_nodes=2",
                   "hydra/launcher=slurm"])
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (2, 8, 8)


# ---- multi-process runs (slow) ----------------------------------------------------------------------

# 12 optimizer steps at global batch 12: 1 process x 12, or 2 processes x 6 each.
EQUIV = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check_interval"))] + [
    "trainer.max_steps=12", "trainer.val_check_interval=6", "test=false", "callbacks.progress=null",
    "callbacks.throughput.every_n_batches=4"]


# Measured with benchmarks/scale_out.py after 60 steps: reordering the same sums (1 process, accumulate 2)
# moves val/loss by 1.7e-7 relative; a real mistake (global batch 6 instead of 12) by 1.7e-2, and
# Lightning's default shuffling sampler (other windows per step) by 4.7e-3. 1e-4 is far above float noise
# and far below either mistake.
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def single_process_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("single")
    train(EQUIV, runs)
    return read_metrics(run_dirs(runs)[0])


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["ddp_cpu", "fsdp_cpu"])
def test_two_cpu_processes_reach_the_single_process_loss(single_process_run, tmp_path, trainer):
    """Same seed, same global batch, same windows (each rank loads its share of every global batch in order:
    lab.data.batching.step_ordered_sampler), so the mean of the two ranks' mean gradients is the full-batch
    mean gradient: the same maths, only float32 summation order differs (all-reduce / reduce-scatter vs one
    batch). See TOLERANCE."""
    train([*EQUIV, f"trainer={trainer}"], tmp_path)
    (run,) = run_dirs(tmp_path)
    multi = metric_by_step(read_metrics(run), "val/loss")
    single = metric_by_step(single_process_run, "val/loss")
    assert sorted(multi) == sorted(single) and len(single) == 2
    for step in single:
        assert multi[step] == pytest.approx(single[step], rel=TOLERANCE), (step, multi[step], single[step])


@pytest.mark.slow
def test_sharded_fsdp_checkpoint_resumes_the_same_curve(tmp_path):
    """Run A keeps every validation's sharded checkpoint (directories); run B resumes from A's checkpoint
    after 6 steps: its final validation loss equals A's (same data windows, optimizer and schedule state)."""
    args = [*EQUIV, "trainer=fsdp_cpu", "callbacks.checkpoint.save_top_k=-1"]
    train(args, tmp_path / "a")
    (run_a,) = run_dirs(tmp_path / "a")
    ckpt = run_a / "checkpoints" / "best-step6.ckpt"
    assert ckpt.is_dir() and sorted(p.name for p in ckpt.iterdir() if p.suffix == ".distcp") == ["__0_0.distcp", "__1_0.distcp"]
    train([*args, f"ckpt_path={ckpt}"], tmp_path / "b")
    (run_b,) = run_dirs(tmp_path / "b")
    a, b = metric_by_step(read_metrics(run_a), "val/loss"), metric_by_step(read_metrics(run_b), "val/loss")
    assert sorted(b) == [11]  # logged at the last step index; checkpoints are named by steps done
    assert b[11] == pytest.approx(a[11], rel=1e-5)
    # and the consolidated single file serves inference
    out = tmp_path / "consolidated.ckpt"
    assert run_module("lab.checkpoint", ["consolidate", str(run_a / "checkpoints" / "last.ckpt"), str(out)], tmp_path).returncode == 0
    from lab.checkpoints.reading import load_model

    model, tokenizer, meta = load_model(out)
    assert meta["config"]["trainer"]["strategy"]["_target_"] == "lab.runtime.trainer.strategies.FSDP2Strategy"
    assert sum(p.numel() for p in model.parameters()) > 0 and tokenizer.vocab_size == model.vocab_size


CPU_EXPERIMENTS = [p.stem for p in sorted((ROOT / "conf" / "experiment").glob("*.yaml"))
                   if "gpu" not in p.stem and "moe" not in p.stem]


@pytest.mark.parametrize("experiment", CPU_EXPERIMENTS)
@pytest.mark.parametrize("trainer", ["ddp_cpu", "fsdp_cpu"])
def test_every_cpu_experiment_accepts_the_cpu_strategies(compose, experiment, trainer):
    """The strategies are task-agnostic: any experiment takes them with nothing else changed."""
    cfg = compose([f"+experiment={experiment}", f"trainer={trainer}"])
    check_trainer(cfg)
    assert cfg.data.batch_size % cfg.trainer.devices == 0, "global batch must split over the 2 processes"


FSDP2_BF16_DECODING = """
import os, torch, torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from lab.models.decoding import generate
from lab.models.gpt import GPT
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
model = GPT(vocab_size=50, n_layers=2, n_heads=2, d_model=32, max_seq_len=32, positions="rotary", init_std=0.3).eval()
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for block in model.decoder.layers:  # as lab.runtime.trainer.strategies.FSDP2Strategy shards: each block, then the root
    fully_shard(block, mp_policy=policy)
fully_shard(model, mp_policy=policy)
prompt = torch.tensor([[3, 1, 4, 1, 5]])
with torch.no_grad():
    cached = generate(model, prompt, 8, temperature=0.0)
    ids = prompt  # the same greedy continuation, recomputed from the whole prefix at every step (no cache)
    for _ in range(8):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
print("CACHED", cached.tolist(), "RECOMPUTED", ids.tolist())
dist.destroy_process_group()
"""


def test_cached_decoding_under_fsdp2_bf16_parameters_equals_recomputation(tmp_path):
    """FSDP2 with param_dtype=bfloat16 computes blocks in bf16 while the stored parameters stay float32:
    the KV cache must hold what the layer computes (a float32 cache met bf16 queries: SDPA refused, which
    stopped gpt2_small_gpu's first validation under trainer=fsdp on the H100)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**__import__("os").environ, "PORT": str(port), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", FSDP2_BF16_DECODING], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip().splitlines()[-1]
    cached, recomputed = line.removeprefix("CACHED ").split(" RECOMPUTED ")
    assert cached == recomputed
