"""Peak memory of importing (and exporting) a Hugging Face checkpoint: lab.hf.importing.load and
lab.hf.exporting.export on a randomly initialised Llama-shaped checkpoint the benchmark writes (bf16, sharded as
transformers shards, TinyLlama-1.1B's shape by default), each in its own process under /usr/bin/time -v.

    nice -n 19 python benchmarks/hf_import_memory.py [--dir /tmp/hf_1b] [--shape 1b|tiny] [--shard-mb 1024]

Reports the weights' size, the peak RSS of a process that only imports lab (the interpreter, torch, lab), of
import, and of import + export (written in the checkpoint's dtype), each as a multiple of the weights' size, and
the CPU time (user + sys). Then a training run's start with model.init_from (the float32 model lab.train builds,
filled by init_from): built as lab.train builds it (build_to_fill: no random initialisation) and, for comparison,
randomly initialised first. The checkpoint is written tensor by tensor (never whole in memory) and reused when
--dir already holds it."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

SHAPES = {  # Llama-shaped: hidden, layers, heads, KV heads, FFN width, vocabulary
    "1b": dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
               intermediate_size=5632, vocab_size=32000),  # TinyLlama-1.1B
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=160, vocab_size=512),  # a check of the script itself
}


def tensors(shape: dict):
    """(name, shape) of every LlamaForCausalLM tensor, in transformers' order."""
    D, F, V = shape["hidden_size"], shape["intermediate_size"], shape["vocab_size"]
    hd = D // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * hd
    yield "model.embed_tokens.weight", (V, D)
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield from ((p + "self_attn.q_proj.weight", (D, D)), (p + "self_attn.k_proj.weight", (kv, D)),
                    (p + "self_attn.v_proj.weight", (kv, D)), (p + "self_attn.o_proj.weight", (D, D)),
                    (p + "mlp.gate_proj.weight", (F, D)), (p + "mlp.up_proj.weight", (F, D)),
                    (p + "mlp.down_proj.weight", (D, F)), (p + "input_layernorm.weight", (D,)),
                    (p + "post_attention_layernorm.weight", (D,)))
    yield "model.norm.weight", (D,)
    yield "lm_head.weight", (V, D)


def build(out: Path, shape: dict, shard_bytes: int) -> int:
    """Write the checkpoint shard by shard (random bf16 weights, norms 1; one shard in memory at a time);
    -> its weights' bytes."""
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models

    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    keys, current, total = [], {}, 0

    def flush() -> None:
        save_file(current, str(out / f"part-{len(keys)}.safetensors"), metadata={"format": "pt"})
        keys.append(list(current))
        current.clear()

    for name, dims in tensors(shape):
        t = torch.ones(dims, dtype=torch.bfloat16) if len(dims) == 1 else \
            (torch.randn(dims, generator=gen) * 0.02).to(torch.bfloat16)
        if current and sum(v.numel() * 2 for v in current.values()) + t.numel() * 2 > shard_bytes:
            flush()
        current[name] = t
        total += t.numel() * 2
    flush()
    names = [f"model-{i + 1:05d}-of-{len(keys):05d}.safetensors" for i in range(len(keys))]
    for i, name in enumerate(names):
        (out / f"part-{i}.safetensors").replace(out / name)
    index = {"metadata": {"total_size": total}, "weight_map": {k: names[i] for i, ks in enumerate(keys) for k in ks}}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **shape, "hidden_act": "silu",
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
              "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    vocab = {f"t{i}": i for i in range(shape["vocab_size"])}
    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(out / "tokenizer.json"))
    return total


STEPS = ("baseline", "import", "export", "init_from", "init_from_after_init")


def init_from_run(ckpt: Path, to_fill: bool) -> None:
    """What lab.train does with model.init_from=ckpt: the run's float32 model from the directory's settings, then
    filled by init_from; to_fill=False initialises it randomly first (a classifier's path)."""
    from lab.data.tokenizers import tokenizer_from_hf_dir
    from lab.hf.importing import build_to_fill, init_from, read_dir, read_weights
    from lab.hf.registry import MODELS
    from lab.hf.shape import family_of

    p, config = read_dir(ckpt)
    family = family_of(p, config)
    with read_weights(p) as weights:
        settings = family.config_from_hf(config, family.fold(weights, config), tokenizer_from_hf_dir(p))
    model = build_to_fill(lambda: MODELS[family.kind](**settings), str(p) if to_fill else None, resuming=False)
    init_from(model, str(p), {})


def measure(args: list[str]) -> tuple[float, float]:
    """-> (peak RSS in bytes, user + sys seconds) of `python this_file args` under /usr/bin/time -v."""
    run = subprocess.run(["/usr/bin/time", "-v", sys.executable, __file__, *args], capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(run.stdout + run.stderr)
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr)[1])
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", run.stderr)[1]) for k in ("User", "System"))
    return kb * 1024, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/hf_import_memory")
    ap.add_argument("--shape", choices=list(SHAPES), default="1b")
    ap.add_argument("--shard-mb", type=int, default=1024)
    ap.add_argument("--step", choices=list(STEPS), help=argparse.SUPPRESS)  # a measured child
    a = ap.parse_args()
    ckpt = Path(a.dir) / a.shape
    if a.step:
        from lab.hf.exporting import export
        from lab.hf.importing import load

        if a.step.startswith("init_from"):
            init_from_run(ckpt, a.step == "init_from")
        elif a.step != "baseline":
            imported = load(ckpt)
            if a.step == "export":
                with tempfile.TemporaryDirectory(dir=a.dir) as out:
                    export(imported.model, imported.tokenizer, {}, Path(out))
        return
    if not (ckpt / "config.json").is_file():
        build(ckpt, SHAPES[a.shape], a.shard_mb * 2**20)
    size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
    print(f"checkpoint: {ckpt}, {a.shape} Llama-shaped, bf16, {len(list(ckpt.glob('*.safetensors')))} shard(s), "
          f"weights {size / 2**30:.2f} GiB")
    for step in STEPS:
        rss, cpu = measure(["--dir", a.dir, "--shape", a.shape, "--step", step])
        print(f"{step:>18}: peak RSS {rss / 2**30:.2f} GiB = {rss / size:.2f}x the weights; CPU {cpu:.1f} s (user+sys)")


if __name__ == "__main__":
    main()
