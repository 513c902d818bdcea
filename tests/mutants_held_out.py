"""One-line bugs in the held-out splits of text files (lab.data.corpora: the caps, `spread`, the share warning;
lab.data.sources.stream: cuts at line ends; lab.data.shards: the tokenizer sample of a spread plan) that
tests/data/test_held_out.py must kill, and in the choice of a sweep's best runs for their test pass
(lab.runtime.inference.evaluation.best_runs: tests/runtime/inference/test_best_runs.py), for the mutation
script (tests/mutants.py)."""
from __future__ import annotations

from mutants_moe import Mutant

T = "tests/data/test_held_out.py"
MLMS = f"{T}::test_an_mlm_of_several_corpora_says_and_records_what_each_held_out_under_its_own_path"
MLM = f"{T}::test_the_mlm_records_and_says_its_held_out_splits_and_names_a_cache_of_before_the_caps"
BEST = "tests/runtime/inference/test_best_runs.py::test_each_variant_is_its_run_with_the_lowest_val_loss"

MUTANTS = [
    Mutant("held out: one stratum too few", "lab/data/corpora.py",
           "k, rng = max(1, -(-held // piece)), random.Random(seed)", "k, rng = max(1, held // piece), random.Random(seed)",
           [f"{T}::test_spread_puts_one_stretch_of_each_split_in_each_stratum_at_its_seeded_offset"]),
    Mutant("held out: a stretch never starts at its stratum's last place", "lab/data/corpora.py",
           "sum(n for _, n in lengths)) + 1)", "sum(n for _, n in lengths)))",
           [f"{T}::test_a_budget_the_size_of_its_stratum_takes_all_of_it"]),
    Mutant("held out: a stretch over a file boundary loses its last byte in the first file", "lab/data/corpora.py",
           "a, b = max(a - start, 0), min(b - start, size)", "a, b = max(a - start, 0), min(b - start, size - 1)",
           [f"{T}::test_a_stretch_over_a_file_boundary_is_split_between_the_files"]),
    Mutant("held out: the cap is ignored", "lab/data/corpora.py",
           "and f * total > caps[s]]", "and False]",
           [f"{T}::test_over_the_cap_each_split_is_its_capped_size_of_whole_lines_at_the_seeded_offset"]),
    Mutant("held out: the cap applies under it too", "lab/data/corpora.py",
           "and f * total > caps[s]]", "]",
           [f"{T}::test_under_the_cap_the_plan_and_cache_key_are_the_file_tails_of_before"]),
    Mutant("held out: a line cut goes before its newline", "lab/data/sources/stream.py",
           'cut = data.find(b"\\n", max(cut, 0)) + 1', 'cut = data.find(b"\\n", max(cut, 0))',
           [f"{T}::test_over_the_cap_each_split_is_its_capped_size_of_whole_lines_at_the_seeded_offset"]),
    Mutant("held out: a cut in the line an earlier cut moved to its end takes the next line", "lab/data/sources/stream.py",
           "if at_lines and not wide and cuts[part] < snapped:", "if at_lines and not wide and cuts[part] < 0:",
           [f"{T}::test_a_cut_moves_to_the_end_of_its_line_in_any_chunk"]),
    Mutant("tokenizer sample: a spread plan's share counts from the file's start", "lab/data/corpora.py",
           "return (*cuts, start + left), (*keep, True, False)", "return (*cuts, left), (*keep, True, False)",
           [f"{T}::test_sample_parts_take_the_training_parts_up_to_the_share"]),
    Mutant("tokenizer sample: held-out stretches are sampled too", "lab/data/shards.py",
           "            if not keep[part]:\n", "            if False:\n",
           [f"{T}::test_the_tokenizer_sample_of_a_spread_plan_is_its_training_text_only"]),
    Mutant("held out: a share far above the one asked is not warned about", "lab/data/corpora.py",
           "and asked and not asked / FAR <= share <= asked * FAR:", "and asked and share < asked / FAR:",
           [f"{T}::test_a_held_out_split_far_from_the_share_asked_is_warned_about_with_its_share"]),
    Mutant("held out: a cache from before the caps is named when there is none", "lab/data/shards.py",
           "not (out / MANIFEST).exists() and (old / MANIFEST).exists():", "not (out / MANIFEST).exists():",
           [f"{T}::test_a_cache_prepared_before_the_caps_is_named_when_the_capped_split_is_prepared"]),
    Mutant("held out: the MLM records and says no held-out splits", "lab/data/mlm.py",
           "return next(iter(streamed.values()), {})", "return {}", [MLM]),
    Mutant("held out: an MLM of several corpora gives each corpus's plan as a share of the shared splits",
           "lab/data/mlm.py", "splits if len(self.corpora) == 1 else None", "splits", [MLMS]),
    Mutant("held out: an MLM corpus's line names data.corpus.* settings", "lab/data/corpora.py",
           'if where == "data.corpus" else (lambda name: f"{where}\'s {name}")', "", [MLM, MLMS]),
    Mutant("held out: the MLM looks for the capped plan's cache as the one before the caps", "lab/data/mlm.py",
           "            files = corpus.before_caps\n", "            pass\n", [MLM]),
    Mutant("best run: a run is judged by its last validation", "lab/runtime/inference/evaluation.py",
           'value = min(values) if mode == "min" else max(values)', "value = values[-1]", [BEST]),
    Mutant("best run: each seed is a variant", "lab/runtime/inference/evaluation.py",
           '("seed=", "hydra."))]', '("hydra.",))]', [BEST]),
    Mutant("best run: the worst run of a variant is tested", "lab/runtime/inference/evaluation.py",
           '(value < best[variant][1] if mode == "min"', '(value > best[variant][1] if mode == "min"', [BEST]),
    Mutant("best run: a variant is named by the overrides every run shares too", "lab/runtime/inference/evaluation.py",
           'variant = " ".join(o for o in overrides[run] if o not in shared)', 'variant = " ".join(overrides[run])',
           [BEST]),
]
