"""One-line bugs in model ladders (lab.runtime.cli.ladder: the rung's budget and its checks; the run's cost in
lab.runtime.callbacks.throughput) and in lab.report's scaling view (the law's fit, the multiplier, the bootstrap,
the verdict, the held-out check) that their tests must kill, for the mutation script (tests/mutants.py)."""
from __future__ import annotations

from mutants_moe import Mutant

SCALING = "tests/report/test_scaling.py"
LADDER = "tests/runtime/cli/test_ladder.py"
BAD = LADDER + "::test_bad_ladder_is_one_error_line_naming_the_fix"
STEPS = LADDER + "::test_rung_budget_sets_steps_warmup_and_validation_by_hand"

MUTANTS = [
    Mutant("scaling fit: plain least squares, one outlier moves it", "lab/report/scaling.py",
           'loss="huber"', 'loss="linear"', [SCALING + "::test_huber_loss_keeps_one_outlier_from_moving_the_fit"]),
    Mutant("scaling fit: A left at the centred compute", "lab/report/scaling.py",
           "Law(math.exp(log_e), log_a0 + alpha * math.log(c0), alpha)", "Law(math.exp(log_e), log_a0, alpha)",
           [SCALING + "::test_fit_recovers_the_parameters_of_an_exact_power_law"]),
    Mutant("compute multiplier inverted", "lab/report/scaling.py",
           "return base.compute_for(float(variant.loss(c))) / c", "return c / base.compute_for(float(variant.loss(c)))",
           [SCALING + "::test_multiplier_is_the_constant_factor_of_a_shifted_law_at_every_scale"]),
    Mutant("bootstrap resamples nothing", "lab/report/scaling.py",
           "rng.integers(0, len(rung), len(rung))", "range(len(rung))",
           [SCALING + "::test_fit_with_seed_noise_stays_close_and_its_bootstrap_interval_covers_the_truth"]),
    Mutant("verdict: shrinks when only some refits shrink", "lab/report/scaling.py",
           "if interval(change)[1] < 0:", "if interval(change)[0] < 0:", [SCALING + "::test_verdict_reads_the_intervals"]),
    Mutant("held-out check fits the rung it predicts", "lab/report/scaling.py",
           "smaller = [p for r in pairs[:-1] for p in r]", "smaller = [p for r in pairs for p in r]",
           [SCALING + "::test_held_out_error_is_the_fit_without_the_largest_rung_at_it"]),
    Mutant("a fit from two rungs", "lab/report/scaling.py",
           "if len(rungs) < MIN_RUNGS:", "if len(rungs) < 2:", [SCALING + "::test_too_few_rungs_say_so_instead_of_a_number"]),
    Mutant("--scaling on over one size is silent", "lab/report/scaling.py",
           '        if mode == "on":\n', "        if False:\n",
           [SCALING + "::test_scaling_view_on_runs_of_one_size_is_one_error_naming_the_fix"]),
    Mutant("ladder: the token embedding counted in N", "lab/runtime/cli/ladder.py",
           "VOCABULARY_ROLES = frozenset({Role.EMBEDDING, Role.READOUT})", "VOCABULARY_ROLES = frozenset({Role.READOUT})",
           [LADDER + "::test_non_embedding_count_leaves_out_the_vocabulary_matrices", STEPS]),
    Mutant("ladder: steps from tokens without the batch", "lab/runtime/cli/ladder.py",
           "per_step = int(cfg.data.batch_size) * seq_len", "per_step = seq_len", [STEPS]),
    Mutant("ladder: a budget shorter than the warmup trains", "lab/runtime/cli/ladder.py",
           "if steps <= warmup:", "if steps < 0:", [BAD]),
    Mutant("ladder: on a task without an LM loss", "lab/runtime/cli/ladder.py",
           'if cfg.task.get("_target_") != LM_TASK:', "if False:", [BAD]),
    Mutant("ladder: a rung whose heads do not divide its width", "lab/runtime/cli/ladder.py",
           "if heads < 1 or rung.d_model % heads:", "if heads < 1:", [BAD]),
    Mutant("ladder: a µP ladder states the sp lr rule", "lab/runtime/cli/ladder.py",
           'if cfg.model.get("parametrization") == "mup":', "if False:",
           [LADDER + "::test_a_mup_ladder_trains_each_rung_under_the_mup_rules_and_says_so"]),
    Mutant("lab.report --transfer: a run without a width is a KeyError", "lab/report/transfer.py",
           "if run.config.get(WIDTH) is None or run.config.get(key) is None:", "if False:",
           ["tests/report/test_transfer.py::test_runs_without_a_width_or_lr_are_one_error_line"]),
    Mutant("--help: a schema without _target_ breaks schema_for", "lab/runtime/cli/schemas.py",
           "return next((s for s in SCHEMAS.values() if _target_of(s) == target), None)",
           "return next((s for s in SCHEMAS.values() if s._target_ == target), None)",
           ["tests/runtime/cli/test_help.py::test_a_recipe_is_listed_and_its_comments_describe_the_whole_config"]),
]
