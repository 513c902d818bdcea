"""One-line bugs in what lab writes and refuses before a run (issue 48): the run-directory journal
(lab.runtime.rundir.journal), the export folder (lab.checkpoints.export_dir), the Optuna search-space checks
(hydra_plugins/lab_optuna_sweeper), damaged .safetensors files and the data readers' lines, for the mutation
script (tests/mutants.py)."""
from __future__ import annotations

from mutants_moe import Mutant

JOURNAL = "tests/runtime/rundir/test_journal.py"
JOURNAL_UNIT = (f"{JOURNAL}::test_a_refused_launch_leaves_another_runs_directory_byte_for_byte",
                f"{JOURNAL}::test_a_directory_this_launch_made_is_removed_and_one_it_found_empty_is_kept")
EXPORT = ("tests/checkpoints/test_export_dir.py",)
SPACE = ("tests/runtime/sweeps/test_sweeps_optuna.py::test_a_search_space_optuna_cannot_sample_is_one_line",
         "tests/runtime/sweeps/test_sweeps_optuna.py::test_int_interval_draws_integers_and_a_command_line_sweep_replaces_the_params_one")

MUTANTS = [
    Mutant("journal: status.json rewritten unrecorded", "lab/runtime/rundir/run_dir.py",
           "        journal.before_write(self.path / STATUS_FILE)\n", "", JOURNAL_UNIT),
    Mutant("journal: any empty directory entered counts as made here", "lab/runtime/rundir/journal.py",
           " and path.stat().st_mtime_ns >= STARTED_NS", "", JOURNAL_UNIT),
    Mutant("journal: a refused run is not undone", "lab/runtime/cli/errors.py",
           "restored = journal.undo()", "restored = False",
           (f"{JOURNAL}::test_train_refused_in_another_tasks_finished_run_rewrites_nothing",)),
    Mutant("export: a folder of the user's files is written into", "lab/checkpoints/export_dir.py",
           "    if theirs:\n", "    if False:\n", EXPORT),
    Mutant("export: files keep safetensors' 0600 / a fixed mode", "lab/checkpoints/export_dir.py",
           "p.chmod(0o666 & ~mask)", "p.chmod(0o644)", EXPORT),
    Mutant("export: a failed export leaves its temporary folder", "lab/checkpoints/export_dir.py",
           "    finally:\n        shutil.rmtree(tmp, ignore_errors=True)", "    finally:\n        pass", EXPORT),
    Mutant("sweep: an interval of one point passes", "hydra_plugins/lab_optuna_sweeper/sweeper.py",
           "if v.start >= v.end:", "if v.start > v.end:", SPACE),
    Mutant("sweep: a log interval from 0 passes", "hydra_plugins/lab_optuna_sweeper/sweeper.py",
           "if log_scale and v.start <= 0:", "if log_scale and v.start < 0:", SPACE),
    Mutant("sweep: int(interval) still draws floats", "hydra_plugins/lab_optuna_sweeper/sweeper.py",
           'integer = "log" in v.tags, isinstance(v.start, int) and isinstance(v.end, int)',
           'integer = "log" in v.tags, False', SPACE),
    Mutant("sweep: a key searched and fixed passes", "hydra_plugins/lab_optuna_sweeper/sweeper.py",
           "if key in searched and not o.is_sweep_override():", "if False:", SPACE),
    Mutant("sweep: the YAML's key path gets Hydra's line", "lab/runtime/cli/errors.py",
           "if swept and swept.group(1):", "if False:",
           ("tests/runtime/sweeps/test_sweeps_optuna.py::test_bad_search_spaces_exit_2_before_any_trial",)),
    Mutant("safetensors: only the header's length is checked", "lab/checkpoints/safetensors_file.py",
           "    if 8 + n + end > size:", "    if False:", ("tests/checkpoints/test_safetensors_file.py",)),
    Mutant("data: a symlink loop reads as a missing target", "lab/data/sources/reading.py",
           "if e.errno == errno.ELOOP else", "if False else",
           ("tests/data/test_data_files.py::test_a_symbolic_link_loop_or_a_dangling_link_is_named_as_such",)),
    Mutant("data: dropped lines do not name text_field", "lab/data/sources/reading.py",
           "if lacked\n", "if False\n",
           ("tests/data/test_data_files.py::test_language_model_reads_the_users_text_exactly[skipped-records-name-the-field-setting]",)),
    Mutant("data: empty records vanish uncounted", "lab/data/sources/stream.py",
           "            if not value.strip():  # no document", "            if False:  # no document",
           ("tests/data/test_data_files.py::test_language_model_reads_the_users_text_exactly[empty-records-counted]",)),
    Mutant("cli: a,b in one run gets Hydra's line without a fix", "lab/runtime/cli/errors.py",
           "        if comma:  # a,b", "        if False:  # a,b",
           ("tests/runtime/cli/test_config_errors.py::test_config_mistake_is_one_line[comma-is-a-sweep]",)),
    Mutant("cli: interval() told to add -m, which cannot sample it", "lab/runtime/cli/errors.py",
           'if "interval(" in multi.group(1)', "if False",
           ("tests/runtime/cli/test_config_errors.py::test_config_mistake_is_one_line[interval-needs-a-search]",)),
    Mutant("cli: unquoted non-ASCII gets the lexer's line", "lab/runtime/cli/errors.py",
           "if eq and not value.isascii()", "if False",
           ("tests/runtime/cli/test_config_errors.py::test_config_mistake_is_one_line[non-ascii-unquoted]",)),
    Mutant("prepare: lab.train's checks skipped", "lab/prepare.py",
           "    check_config(cfg)  # lab.train's checks", "    pass  # lab.train's checks",
           ("tests/entry/test_prepare_checks.py::test_a_setting_lab_train_refuses_prepares_nothing",)),
    Mutant("prepare: a refusal keeps its new log folder", "lab/runtime/cli/errors.py",
           "if out and (hc.output_subdir is not None or ", "if out and (hc.output_subdir is not None and ",
           ("tests/entry/test_prepare_checks.py::test_a_refused_prepare_leaves_no_log_folder",)),
    Mutant("eval: settings checked after the data is prepared", "lab/eval.py",
           "    check_settings(cfg)\n", "",
           ("tests/runtime/inference/test_inference_cli.py::test_bad_settings_are_one_error_line_before_the_checkpoint_is_read",)),
    Mutant("eval: bootstrap_samples=0 passes", "lab/eval.py", "or samples < 1:", "or samples < 0:",
           ("tests/runtime/inference/test_inference_cli.py::test_bad_settings_are_one_error_line_before_the_checkpoint_is_read",)),
    Mutant("data: a labelled text given as a number is replaced silently", "lab/data/classification.py",
           "            if not isinstance(r[self.text_field], str):", "            if False:", ("tests/data/test_data_files.py::test_a_text_given_as_a_number_is_read_as_json_writes_it_and_counted",)),
    Mutant("data: a pair side given as a number is replaced silently", "lab/data/parallel.py",
           "            if not (isinstance(source, str) and isinstance(target, str)):", "            if False:", ("tests/data/test_data_files.py::test_a_text_given_as_a_number_is_read_as_json_writes_it_and_counted",)),
]
