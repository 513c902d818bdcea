"""LabDataModule: what lab's entry points (lab.train, lab.prepare, lab.eval) and tasks read from a datamodule,
declared in one place. Every datamodule of lab.data derives from it; a new one does too, and sets what applies."""
from __future__ import annotations

from typing import Any, ClassVar

import lightning as L


class LabDataModule(L.LightningDataModule):
    shards_batches: ClassVar[bool] = False
    """True: the datamodule gives each rank its share of every global batch itself, so the trainer must not add
    Lightning's distributed sampler."""

    def __init__(self) -> None:
        super().__init__()
        self.tokenizer = None
        """The tokenizer once set up (lab.data.tokenizers): tasks decode examples with it."""
        self.labels: list[str] | None = None
        """The label names in class order, for a labelled dataset once set up; None: not a classification set."""
        self.report: dict[str, Any] = {}
        """What setup read, dropped or truncated (saved as <run dir>/data_report.json); "prepared": where the
        prepared data lies, for a datamodule that prepares it ahead."""

    @property
    def vocab(self) -> dict[str, int]:
        """What the model needs to know about the data (vocab_size and the special ids)."""
        raise NotImplementedError

    def use_for_test(self, split: str) -> None:
        """Let the test pass score `split` ("val": lab.eval split=valid). By default the validation batches."""
        if split == "val":
            self.test_dataloader = self.val_dataloader

    def checkpoint_metadata(self) -> dict[str, Any]:
        """What every checkpoint carries of the data besides the vocabulary (labels, the languages), for lab.classify
        and the other inference commands; nothing by default."""
        return {}

    def tokens_per_byte(self, stage: str) -> float | None:
        """Tokens per byte of raw text of what `stage` ("val" | "test") scores, for bits per byte; None: unknown."""
        return None
