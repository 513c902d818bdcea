"""One-line bugs in the Hugging Face conversion (lab/runtime/hf) and the fine-tuning options that the export,
import and pipeline tests must kill, for the mutation script (tests/mutants.py)."""
from __future__ import annotations

PIPELINES = "tests/test_export_pipelines.py"
IMPORT = "tests/test_hf_import.py"

MUTANTS = [
    ("LM data ignores data.tokenizer_from (trains its own)", "lab/data/lm.py",
     "            if self.tokenizer_from is not None:\n                tok = tokenizer_from_hf_dir",
     "            if False:\n                tok = tokenizer_from_hf_dir",
     [f"{IMPORT}::test_an_lm_fine_tunes_from_a_transformers_gpt2_with_its_tokenizer"]),
    ("exported tokenizer without lab's normaliser", "lab/runtime/hf/tokenizer.py",
     "steps = lab_normalizer(granularity) if granularity else []", "steps = []",
     [f"{PIPELINES}::test_text_generation_pipeline_gives_lab_generate_ids"]),
    ("sentence normaliser keeps edge whitespace", "lab/runtime/hf/tokenizer.py",
     'normalizers.Replace(Regex(r"\\A | \\z"), "")', 'normalizers.Replace(" ", " ")',
     [f"{PIPELINES}::test_translation_tokenize_then_generate_gives_lab_translate"]),
    ("causal LM tokenizer pads on the right", "lab/runtime/hf/tokenizer.py",
     '"left" if kind == "lm" else "right"', '"right"',
     [f"{PIPELINES}::test_batched_generate_pads_on_the_left"]),
    ("encoder export adds no [SEP]", "lab/runtime/hf/tokenizer.py",
     'single=f"{cls} $A {sep}"', 'single=f"{cls} $A"',
     [f"{PIPELINES}::test_text_classification_pipeline_gives_lab_classify"]),
    ("model_max_length is max_seq_len", "lab/runtime/hf/__init__.py",
     "return from_config(meta) if meta.get(\"config\") else model.cfg.max_seq_len", "return model.cfg.max_seq_len",
     [f"{PIPELINES}::test_text_generation_pipeline_gives_lab_generate_ids"]),
    ("import accepts non-zero values where lab has no parameter", "lab/runtime/hf/importing.py",
     "zeros = (src_ids == 0) & (src != 0)", "zeros = (src_ids == 0) & (src != src)",
     [f"{IMPORT}::test_a_bias_where_lab_has_none_is_refused"]),
    ("BERT import drops token type 0", "lab/runtime/hf/bert.py",
     "state[positions] = state[positions] + state[types][0]", "state[positions] = state[positions]",
     [f"{IMPORT}::test_a_transformers_bert_imports_with_its_logits"]),
    ("Mixtral experts' gate and up swapped", "lab/runtime/hf/mixtral.py",
     "gate, up = w_in.split(w_in.shape[0] // 2)", "up, gate = w_in.split(w_in.shape[0] // 2)",
     [f"{IMPORT}::test_a_transformers_lm_imports_with_its_logits"]),
    ("finetune head_lr ignored", "lab/tasks/base.py",
     '[{**g, "params": head(g), "lr": self.finetune.head_lr} for g in groups]', '[{**g, "params": head(g)} for g in groups]',
     ["tests/test_finetune.py"]),
    ("freeze_blocks freezes one block too many", "lab/tasks/base.py",
     "for block in m.layers[: self.freeze_blocks]", "for block in m.layers[: self.freeze_blocks + 1]",
     ["tests/test_finetune.py"]),
]
