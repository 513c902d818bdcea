"""The run directory and preemption: the directory as one object from its claim to its release (run_dir.RunDir,
through which everything at its top level is written), one process per directory (lock), the earlier run and
checkpoint `ckpt_path=auto` continues (autoresume), which process of a distributed job owns it (ranks), and
stopping on a signal after a checkpoint with an exit code that says "resume" (signals)."""
