"""The run-time: what surrounds a LightningModule in a run, one subpackage per concern (docs/architecture.md;
import-linter keeps the layers, top to bottom):

    training       one `lab.train` run, as its steps
    trainer        the Lightning Trainer: strategies and their checks, resume checks, loggers, one fit
    callbacks      Lightning callbacks every task shares (checkpointing, progress, throughput, EMA)
    sweeps         Hydra multiruns: each job's record, skip / resume on a re-run, the summary; Optuna trials
    inference      after training: inputs and outputs, batched prediction, evaluation
    cli            what every entry point shares: the `error:` exit, resolvers, --help, console, config checks
    rundir         the run directory as one object (RunDir), its lock, ckpt_path=auto, ranks, stop signals
"""
