"""Mutation check: put one-line bugs into a temporary copy of the repository and run, for each, only the tests
that should catch it. Every listed mutant must be killed (some test fails); a survivor is a hole in the suite.

    python tests/mutants.py                 # all mutants (this file's and every tests/mutants_*.py's MUTANTS)
    python tests/mutants.py causal beam     # only mutants whose name contains one of these words
    python tests/mutants.py --list
    python tests/mutants.py --check         # every mutant applies and names collected tests (runs none)

A mutant is (name, file, old, new, tests): `old` must occur exactly once in `file` (so a refactoring that moves
the code makes the entry fail loudly instead of silently testing nothing); `tests` are pytest node ids or
files, kept few so the whole run takes minutes. Exit status 1 if any mutant survived or no longer applies.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DECODING = "tests/models/test_decoding.py"
RESUME_LM = "tests/runtime/trainer/test_resume.py::test_resumed_run_continues_the_uninterrupted_curve[lm-accum2]"
FLOPS = "tests/models/test_models.py::test_flops_count_the_parameters_of_matrix_products_not_the_lookup_tables"
RESUME_CLS = "tests/runtime/trainer/test_resume.py::test_resumed_run_continues_the_uninterrupted_curve[classifier-accum1]"
SCHEMAS = "tests/models/test_model_schemas.py"
PROGRESS = "tests/runtime/callbacks/test_progress.py"
GLOBAL_METRICS = "tests/runtime/trainer/test_global_metrics.py"

MUTANTS = [
    # lab/models/decoding.py
    ("beam length normalised by length + 1", "lab/models/decoding.py",
     "/ step**length_penalty", "/ (step + 1)**length_penalty", [DECODING]),
    ("beam: eos at the length limit is free", "lab/models/decoding.py",
     "== eos, logp[forced], float(\"-inf\"))", "== eos, 0.0, float(\"-inf\"))[None]", [DECODING]),
    ("beam: eos candidates continue as live beams", "lab/models/decoding.py",
     ".masked_fill(is_eos.gather(1, keep), float(\"-inf\"))[live]", "[live]", [DECODING]),
    ("greedy: one token past the length limit", "lab/models/decoding.py",
     "(step >= max_lens)[:, None]", "(step > max_lens)[:, None]", [DECODING]),
    ("generate: slides one token too far", "lab/models/decoding.py",
     "ctx_start = ids.shape[1] - window // 2", "ctx_start = ids.shape[1] - window // 2 + 1", [DECODING]),
    ("top-k keeps only k-1 tokens", "lab/models/decoding.py",
     "logits.masked_fill(logits < kth,", "logits.masked_fill(logits <= kth,", ["tests/models/test_models.py"]),
    ("top-p drops the token that completes the nucleus", "lab/models/decoding.py",
     "drop = cum - sorted_logits.softmax(-1) >= top_p", "drop = cum >= top_p", ["tests/models/test_models.py"]),
    # lab/nn
    ("causal_mask lets each position see one future key", "lab/nn/attention.py",
     "[:, None] + offset >=", "[:, None] + offset + 1 >=", [DECODING]),
    ("rotary positions restart at 0 on cached steps", "lab/nn/attention.py",
     "start = cache.length if cache is not None else 0", "start = 0", [DECODING]),
    ("a cache step overwrites the previous slot", "lab/nn/attention.py",
     "start, end = self.length, self.length + k.shape[2]",
     "start = self.length - (0 < self.length and k.shape[2] == 1); end = start + k.shape[2]", [DECODING]),
    ("the KV cache stays in the parameters' dtype", "lab/nn/attention.py",
     "if k.dtype != self.k.dtype:", "if False:",
     ["tests/runtime/trainer/test_strategies.py::test_cached_decoding_under_fsdp2_bf16_parameters_equals_recomputation"]),
    ("beam reorder forgets the values", "lab/nn/attention.py",
     "self.v = self.v.index_select(0, index)", "self.v = self.v", [DECODING]),
    ("explicit mask drops the causal part", "lab/nn/attention.py",
     "mask = causal if mask is None else mask & causal", "mask = causal if mask is None else mask", [DECODING]),
    ("cross-attention ignores the memory padding mask", "lab/nn/blocks.py",
     "memory=memory, mask=memory_mask, cache=memory_cache", "memory=memory, mask=None, cache=memory_cache",
     [DECODING]),
    ("rms norm backward adds the component along xhat instead of removing it", "lab/nn/norms.py",
     "torch.addcmul(g_xhat, xhat, along, value=-1)", "torch.addcmul(g_xhat, xhat, along, value=1)",
     ["tests/nn/test_norms.py"]),
    ("rms norm backward not scaled by 1/rms", "lab/nn/norms.py",
     ".mul_(rstd), g_weight, None", ", g_weight, None", ["tests/nn/test_norms.py"]),
    ("rms norm backward forgets the gain", "lab/nn/norms.py", "g_xhat = g * weight", "g_xhat = g",
     ["tests/nn/test_norms.py"]),
    ("rms norm backward: the projection's mean over D - 1", "lab/nn/norms.py",
     ".div_(xhat.size(-1))", ".div_(xhat.size(-1) - 1)", ["tests/nn/test_norms.py"]),
    ("rms norm: bfloat16 through the float32 function", "lab/nn/norms.py",
     'x.dtype == weight.dtype == torch.float32', 'x.dtype == weight.dtype', ["tests/nn/test_norms.py"]),
    ("rotary's complex turns go the wrong way", "lab/nn/positions.py",
     'torch.stack((cos, sin), dim=-1), persistent=False)', 'torch.stack((cos, -sin), dim=-1), persistent=False)',
     ["tests/nn/test_attention.py"]),
    ("rotary views an odd-offset slice as complex", "lab/nn/positions.py",
     "x.stride(-1) == 1 and x.storage_offset() % 2 == 0 and", "x.stride(-1) == 1 and", ["tests/nn/test_attention.py"]),
    ("rotary's complex turns ignore the start position", "lab/nn/positions.py",
     "self.turns[start : start + T]", "self.turns[:T]", ["tests/nn/test_attention.py"]),
    ("rotary rotates with the wrong sign", "lab/nn/positions.py",
     "torch.stack((-sin, sin), dim=-1)", "torch.stack((sin, -sin), dim=-1)", ["tests/nn/test_attention.py"]),
    ("rotary pairs not swapped", "lab/nn/positions.py",
     "torch.stack((x[..., 1::2], x[..., 0::2]), dim=-1)", "torch.stack((x[..., 0::2], x[..., 1::2]), dim=-1)",
     ["tests/nn/test_attention.py"]),
    ("rotary backward turns the gradient the forward's way", "lab/nn/positions.py",
     "return _rotate(g, cos, -sin), None, None", "return _rotate(g, cos, sin), None, None",
     ["tests/nn/test_attention.py"]),
    ("rotary tables broadcast over the wrong dim in the positions-first layout", "lab/nn/positions.py",
     "tail = (1,) * (-2 - seq_dim)", "tail = ()", ["tests/nn/test_attention.py"]),
    ("sinusoidal table: sin in the odd columns", "lab/nn/positions.py",
     "table[:, 1::2] = torch.cos(", "table[:, 1::2] = torch.sin(", ["tests/nn/test_attention.py"]),
    ("mean pooling averages over padding", "lab/models/encoder.py",
     "return (h * m).sum(1) / m.sum(1).clamp(min=1.0)", "return h.mean(1)", ["tests/models/test_encoder.py"]),
    # lab/models/seq2seq.py
    ("translator encoder ignores the source padding mask", "lab/models/seq2seq.py",
     "self.encoder(self.src_embed(src), padding_mask=src_mask)", "self.encoder(self.src_embed(src))", [DECODING]),
    # the model's typed schemas (lab.runtime.cli.schemas) and their validation
    ("CLI checks skip the model schema's validation", "lab/runtime/cli/config_checks.py",
     "OmegaConf.to_object(node)  # its __post_init__", "OmegaConf.to_container(node)  # its __post_init__", [SCHEMAS]),
    ("a schema's type error shows the value unquoted", "lab/runtime/cli/errors.py",
     'value = repr(found.group(1)) if found else "null"', 'value = found.group(1) if found else "null"', [SCHEMAS]),
    ("unknown-key suggestions miss the schemas' fields", "lab/runtime/cli/errors.py",
     "    if path:  # the typed schemas' fields", "    if not path:  # the typed schemas' fields", [SCHEMAS]),
    ("a schema's refusal of a conf/ file's value forgets the file", "lab/runtime/cli/errors.py",
     'return schema_type_error(key, why, f"conf/{where}.yaml")', "return schema_type_error(key, why)", [SCHEMAS]),
    ("model.moe's value types go unchecked", "lab/nn/config.py",
     "if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds + (int,) * (float in kinds)):",
     "if isinstance(value, bool) and bool not in kinds:", [SCHEMAS]),
    ("a soft-cap of zero accepted", "lab/models/gpt.py", "not self.logit_softcap > 0", "self.logit_softcap < 0",
     [SCHEMAS]),
    ("a classifier dropout of 1 accepted", "lab/models/encoder.py", "if not 0.0 <= self.classifier_dropout < 1.0:",
     "if not 0.0 <= self.classifier_dropout <= 1.0:", [SCHEMAS]),
    ("d_ff of zero accepted", "lab/nn/config.py", '("d_ff", self.d_ff, "4 * d_model")):', '):',
     ["tests/models/test_models.py::test_bad_architecture_values_name_the_field"]),
    ("a nested model.moe is not validated against n_layers", "lab/nn/config.py",
     "            self.moe.validate(self.n_layers)", "            pass", [SCHEMAS]),
    # lab/data
    ("resume skips batch * accumulation windows per step", "lab/data/lm.py",
     "skip=done * self.batch_size)", "skip=done * self.batch_size * self.trainer.accumulate_grad_batches)",
     [RESUME_LM]),
    ("per-device batch forgets accumulation", "lab/data/batching.py",
     "return batch_size // (world * accum)", "return batch_size // world", ["tests/data/test_batching.py"]),
    ("Lightning's set_epoch never reaches the bucket sampler", "lab/data/batching.py",
     "self.sampler = self", "self.sampler = None", ["tests/data/test_batching.py"]),
    ("a resumed bucket sampler starts in epoch 0", "lab/data/batching.py",
     "self.epoch = self.resume_epoch", "self.epoch = 0", ["tests/data/test_batching.py"]),
    ("resume ignores the step after an epoch's last batch", "lab/data/batching.py",
     "math.ceil(batches_in_epoch(epoch) / accum)", "batches_in_epoch(epoch) // accum", ["tests/data/test_batching.py"]),
    ("resumed bucket sampler skips one batch too many", "lab/data/batching.py",
     "mine[self.resume_skip :]", "mine[self.resume_skip + 1 :]", ["tests/data/test_batching.py"]),
    ("step-ordered ranks take contiguous halves", "lab/data/batching.py",
     "range(self.skip + self.rank, self.length - self.length % self.world, self.world)",
     "range(self.skip + self.rank * (self.length // self.world), self.length, 1)", ["tests/data/test_batching.py"]),
    # lab/tasks
    ("label smoothing ignored", "lab/tasks/translation.py",
     "ignore_index=pad_id, label_smoothing=smoothing)", "ignore_index=pad_id)", ["tests/tasks/test_translation.py::test_label_smoothed_loss_matches_hand_computation"]),
    ("padding counted in the translation loss", "lab/tasks/translation.py",
     "ignore_index=pad_id, label_smoothing=smoothing)", "label_smoothing=smoothing)", ["tests/tasks/test_translation.py::test_label_smoothed_loss_matches_hand_computation"]),
    ("warmup starts one step late", "lab/tasks/optim.py",
     "return (step + 1) / warmup_steps", "return step / warmup_steps", ["tests/tasks/test_optim.py"]),
    ("biases get weight decay", "lab/tasks/base.py",
     "decay = [roles[n] not in NO_DECAY_ROLES for", "decay = [True for", ["tests/tasks/test_optim.py"]),
    ("resume forgets the dropout random state", "lab/tasks/base.py",
     "        if rng:\n            states = rng[\"torch\"]", "        if False:\n            states = rng[\"torch\"]",
     [RESUME_CLS]),
    ("training metrics are rank 0's", "lab/tasks/base.py",
     'strategy.reduce(t, reduce_op="mean") if self.trainer.world_size > 1 else t', "t", [GLOBAL_METRICS]),
    ("training metrics logged every micro-batch (the step's last one's)", "lab/tasks/base.py",
     "if not self._train_means or self.trainer.fit_loop._should_accumulate():", "if not self._train_means:", [GLOBAL_METRICS]),
    ("validation routing statistics are rank 0's", "lab/tasks/base.py",
     "self.log_dict(metrics, sync_dist=True)", "self.log_dict(metrics)", [GLOBAL_METRICS]),
    ("a step's micro-batches summed, not averaged", "lab/tasks/step_metrics.py",
     "reduce(sums / torch.tensor(", "reduce(sums + 0 * torch.tensor(", [GLOBAL_METRICS]),
    # BERT layout and the Hugging Face export (lab/nn, lab/models, lab/hf)
    ("embed_norm is ignored", "lab/nn/blocks.py",
     "if cfg.embed_norm else None", "if False else None",
     ["tests/hf/test_against_hf_export.py::test_embed_norm_normalises_what_the_first_block_sees"]),
    ("BERT pooler without its tanh", "lab/models/encoder.py",
     "return torch.tanh(self.dense(h[:, 0]))", "return self.dense(h[:, 0])",
     ["tests/hf/test_against_hf_export.py::test_bert_logits_equal_lab_with_padding[classifier]"]),
    ("Llama export keeps lab's interleaved rotary pairs", "lab/hf/llama.py",
     "order = torch.cat([torch.arange(0, hd, 2), torch.arange(1, hd, 2)])", "order = torch.arange(hd)",
     ["tests/hf/test_against_hf_export.py::test_logits_equal_lab_on_random_inputs[llama-bpe]"]),
    # streamed corpora (lab/data): MLM segment packing, held-out rows of a Hugging Face table
    ("MLM packing: a too-long line keeps one token more than the segment has room for", "lab/data/mlm.py",
     "ids = ids[: self.room]", "ids = ids[: self.room + 1]",
     ["tests/data/test_mlm_stream.py::test_segments_are_a_naive_pack_of_each_whole_split"]),
    ("HF table rows: the held-out tail starts one row late", "lab/data/sources/stream.py",
     "while part < len(cuts) and i * size / rows > cuts[part]:",
     "while part < len(cuts) and (i - 1) * size / rows > cuts[part]:",
     ["tests/data/test_corpora_stream.py::test_hugging_face_datasets_on_disk_are_read_row_by_row_and_held_out_at_rows"]),
    # shards of a file (lab/data/shards.py, mlm.py): a document goes on in the next shard; a resume inside a file
    ("resume inside a file skips one item of the reading too many", "lab/data/shards.py",
     "if item < skip:", "if item <= skip:",
     ["tests/data/test_corpora_stream.py::test_a_file_cut_into_shards_and_killed_inside_resumes_to_the_uninterrupted_bytes"]),
    ("a resume record leaves out the text carried to the next chunk", "lab/data/shards.py",
     "out.cut(item, current, carry, read)", 'out.cut(item, current, "", read)',
     ["tests/data/test_corpora_stream.py::test_a_file_cut_into_shards_and_killed_inside_resumes_to_the_uninterrupted_bytes"]),
    ("the LM's next shard forgets the counts of the document in progress", "lab/data/shards.py",
     'self.doc, self.blank = dict(state["doc"]), state["blank"]', 'self.blank = state["blank"]',
     ["tests/data/test_corpora_stream.py::test_a_file_cut_into_shards_and_killed_inside_resumes_to_the_uninterrupted_bytes"]),
    ("the MLM's next shard drops the segment being filled", "lab/data/mlm.py",
     'list(state["current"])', "[]",
     ["tests/data/test_mlm_stream.py::test_segments_in_many_shards_and_a_resume_inside_the_file_are_the_one_shard_segments"]),
    ("lab.report --ignore: a prefix group also drops keys that only start with its text", "lab/report/variants.py",
     'key == i or (i.endswith(".") and key.startswith(i))', "key.startswith(i)",
     ["tests/report/test_report.py::test_ignored_keys_group_runs_across_lab_versions_and_the_report_names_them"]),
    ("lab.report --ignore: ignored keys are not named in the report", "lab/report/__init__.py",
     'budget_note = " ".join(n for n in (budget_note, ignored_note(runs, ignore)) if n)', "pass",
     ["tests/report/test_report.py::test_ignored_keys_group_runs_across_lab_versions_and_the_report_names_them"]),
    ("WordPiece trains without the fixed alphabet order (ids differ per process)", "lab/data/tokenizers.py",
     "special_tokens=special_tokens + alphabet", "special_tokens=special_tokens",
     ["tests/data/test_data.py::test_wordpiece_training_gives_the_same_vocabulary_and_ids_in_every_process"]),
    ("WordPiece's second reading of the sample is empty (one-shot iterator)", "lab/data/tokenizers.py",
     "        self.read = read\n", "        it = iter(read())\n        self.read = lambda: it\n",
     ["tests/data/test_mlm_stream.py::test_loaded_documents_stay_one_segment_each_and_the_test_pass_scores_every_segment_once"]),
    # checkpoints and metrics.csv (lab/runtime): a published checkpoint's steps have their rows on disk
    ("periodic checkpoint published before its step's metrics row is logged", "lab/runtime/callbacks/checkpointing.py",
     "self._log_step_metrics_now(trainer)", "pass",
     ["tests/checkpoints/test_preemption.py::test_a_checkpoint_is_published_after_the_metrics_rows_of_its_steps_are_fsynced",
      "tests/checkpoints/test_preemption.py::test_a_kill_right_after_a_periodic_checkpoint_leaves_the_metrics_it_covers_on_disk"]),
    ("metrics.csv not fsynced before a checkpoint", "lab/runtime/trainer/metrics_csv.py",
     "os.fsync(f.fileno())", "pass",
     ["tests/checkpoints/test_preemption.py::test_a_checkpoint_is_published_after_the_metrics_rows_of_its_steps_are_fsynced"]),
    # lab/nn/params.py, lab/runtime/trainer/strategies.py (issue 32 item 4: MFU, fused optimizers)
    ("MFU counts a tied embedding as a lookup", "lab/nn/params.py",
     "and id(p) not in in_products}", "}", [FLOPS]),
    ("MFU counts learned positions as matrix products", "lab/nn/params.py",
     "nn.Embedding | LearnedPositions | RelativePositionBias)", "nn.Embedding | RelativePositionBias)", [FLOPS]),
    ("MFU counts the relative position bias as matrix products", "lab/nn/params.py",
     "nn.Embedding | LearnedPositions | RelativePositionBias)", "nn.Embedding | LearnedPositions)", [FLOPS]),
    ("fused optimizer refused also when Lightning clips it", "lab/runtime/trainer/strategies.py",
     "and not str(optimizer.get(\"_target_\", \"\")).startswith(\"lab.\")", "",
     ["tests/runtime/trainer/test_strategies.py::test_fused_optimizers_that_lightning_clips_or_that_are_not_clipped_pass"]),
    # the task/data schemas (lab/tasks/config.py, lab/data/config.py) and what checks them
    ("head_lr=0 passes the finetune range", "lab/tasks/config.py",
     '"task.finetune.head_lr", lambda v: v is None or v > 0', '"task.finetune.head_lr", lambda v: v is None or v >= 0',
     ["tests/tasks/test_finetune.py"]),
    ("muon's schema resets the task's lr", "lab/tasks/config.py",
     '    lr: float = MISSING\n', '    lr: float = 1e-3\n',
     ["tests/tasks/test_task_schemas.py"]),
    ("a key added with + to a schema node is let through", "lab/runtime/cli/config_checks.py",
     "if fields is not None and key not in fields:", "if False:", ["tests/tasks/test_finetune.py"]),
    ("a data range is not checked", "lab/data/config.py",
     '("data.batch_size", lambda v: v >= 1,', '("data.batch_size", lambda v: v >= 0,', ["tests/runtime/cli/test_config_errors.py"]),
    ("a schema's type error stays Hydra's text", "lab/runtime/cli/errors.py",
     "        if typed:\n            return typed\n", "", ["tests/runtime/cli/test_config_errors.py"]),
    # the end-of-run test pass says what it costs (lab/runtime/callbacks/progress.py)
    ("test pass counts only one batch's tokens", "lab/runtime/callbacks/progress.py",
     "self._test_tokens += pl_module.count_tokens(batch)", "self._test_tokens = pl_module.count_tokens(batch)",
     [PROGRESS]),
    ("test pass logs its ETA line at every batch", "lab/runtime/callbacks/progress.py",
     "self._test_next = done + max(1, total * self.log_every_percent // 100)", "self._test_next = done + 1",
     [PROGRESS]),
    ("test pass counts one device's tokens under DDP", "lab/runtime/callbacks/progress.py",
     "tokens = self._test_tokens * trainer.world_size", "tokens = self._test_tokens",
     [PROGRESS]),
]


def collect() -> list[tuple]:
    """This file's MUTANTS and those of every tests/mutants_*.py module (e.g. the MoE mutants)."""
    mutants = list(MUTANTS)
    for path in sorted(Path(__file__).parent.glob("mutants_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        mutants += list(getattr(module, "MUTANTS", []))
    return mutants


def copy_repo(dest: Path) -> None:
    """The working tree as git sees it (tracked and untracked-but-not-ignored files), no .venv, runs or caches."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    for rel in files:
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)


def run_mutant(copy: Path, mutant: tuple) -> tuple[str, float, str]:
    _name, file, old, new, tests = mutant
    path = copy / file
    original = path.read_text()
    if original.count(old) != 1:
        return "NOT APPLIED", 0.0, f"{old!r} occurs {original.count(old)} times in {file}"
    path.write_text(original.replace(old, new))
    env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "", *tests],
                                cwd=copy, env=env, capture_output=True, text=True)
    finally:
        path.write_text(original)
    seconds = time.perf_counter() - start
    if result.returncode == 1:
        failed = [ln.split(" - ")[0].removeprefix("FAILED ") for ln in result.stdout.splitlines() if ln.startswith("FAILED")]
        return "killed", seconds, failed[0] if failed else ""
    if result.returncode == 0:
        return "SURVIVED", seconds, ""
    lines = (result.stdout + result.stderr).strip().splitlines()
    return "ERROR", seconds, lines[-1] if lines else f"pytest exit status {result.returncode}"


def check(mutants: list[tuple]) -> int:
    """Without running any mutant: each `old` occurs exactly once in its file and each listed test is collected
    (a moved or renamed test module would otherwise make its mutants fail as ERROR only when run)."""
    problems = [f"{name}: {old!r} occurs {(ROOT / file).read_text().count(old)} times in {file}"
                for name, file, old, _new, _tests in mutants if (ROOT / file).read_text().count(old) != 1]
    wanted = {test for *_, tests in mutants for test in tests}
    files = sorted({test.split("::")[0] for test in wanted})
    problems += [f"no test file {f}" for f in files if not (ROOT / f).is_file()]
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "",
                             *[f for f in files if (ROOT / f).is_file()]], cwd=ROOT, capture_output=True, text=True).stdout
    collected = set(listed.splitlines()) | {node.split("[")[0] for node in listed.splitlines()}  # all parameters
    problems += [f"not collected: {test}" for test in sorted(wanted) if "::" in test and test not in collected]
    print("\n".join(problems) or f"{len(mutants)} mutants: every `old` occurs once, every test is collected")
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    mutants = collect()
    if "--list" in argv:
        for m in mutants:
            print(f"{m[0]}  ({m[1]})")
        return 0
    if "--check" in argv:
        return check(mutants)
    words = [w.lower() for w in argv]
    chosen = [m for m in mutants if not words or any(w in m[0].lower() for w in words)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="lab-mutants-") as tmp:
        copy = Path(tmp)
        copy_repo(copy)
        for mutant in chosen:
            status, seconds, detail = run_mutant(copy, mutant)
            rows.append((mutant[0], mutant[1], status, seconds, detail))
            print(f"{status:11s} {seconds:6.1f}s  {mutant[0]}  ({mutant[1]})  {detail}", flush=True)
    print("\n| mutant | file | result | killed by |\n|---|---|---|---|")
    for name, file, status, _, detail in rows:
        print(f"| {name} | `{file}` | {status} | {detail.split('::')[-1] if status == 'killed' else detail} |")
    bad = [r for r in rows if r[2] != "killed"]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} killed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
