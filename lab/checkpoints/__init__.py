"""Checkpoint files: read safely (weights_only, lab-only `_target_`s) and rebuilt into models, written
atomically (a kill or a full disk never leaves half a file), and averaged."""
