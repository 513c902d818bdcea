"""The run directory and preemption: one run per directory (a lock for the life of the process), the earlier
run and checkpoint `ckpt_path=auto` continues, the files at the directory's top level, which process of a
distributed job owns it, and stopping on a signal after a checkpoint with an exit code that says "resume"."""
