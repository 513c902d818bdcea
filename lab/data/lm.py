"""Language-modelling data: a corpus tokenized once into uint16/uint32 memmaps, served as random windows."""
from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from lab.data.batching import per_device_batch, step_ordered_sampler
from lab.data.cache import publish_dir
from lab.data.tokenizers import load_or_train, tokenizer_from_json
from lab.errors import DataError

EOS = "<|endoftext|>"


class RandomWindows(Dataset):
    """Sample i is the window [s, s+T] at a start s drawn from (seed, i).

    Batches depend only on the sample index, so a run resumed at step k (which skips the first k * batch
    samples), or split over N devices by lab.data.batching.step_ordered_sampler, sees exactly the windows a
    single uninterrupted run sees.
    """

    def __init__(self, tokens: np.ndarray, block_size: int, seed: int, length: int):
        if len(tokens) <= block_size + 1:
            raise DataError(f"{len(tokens)} tokens is too few for windows of data.block_size={block_size}")
        self.tokens, self.block_size, self.seed, self.length = tokens, block_size, seed, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng((self.seed, i))
        s = int(rng.integers(0, len(self.tokens) - self.block_size - 1))
        chunk = torch.from_numpy(self.tokens[s : s + self.block_size + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]  # inputs, next-token targets: [T], [T]


class LMDataModule(L.LightningDataModule):
    """Fields:
    corpus: a corpus object with `.load(cache_dir) -> Documents` (lab.data.corpora).
    tokenizer: char | bpe (byte-level BPE trained on the train split); vocab_size: BPE vocabulary size.
    block_size: tokens per window. batch_size: GLOBAL windows per optimizer step; each device loads
    batch_size / (devices * accumulate_grad_batches), so results do not depend on the device count.
    eval_batches: validation batches (fixed windows, the same at every validation).
    """
    shards_batches = True  # step_ordered_sampler gives each rank its share of every global batch

    def __init__(
        self,
        corpus,
        tokenizer: str = "bpe",
        vocab_size: int = 2048,
        block_size: int = 256,
        batch_size: int = 32,
        eval_batches: int = 20,
        cache_dir: str = "~/.cache/lab",
        seed: int = 1337,
        num_workers: int = 0,
    ):
        super().__init__()
        self.corpus, self.tokenizer_kind, self.vocab_size_setting = corpus, tokenizer, vocab_size
        self.block_size, self.batch_size, self.eval_batches = block_size, batch_size, eval_batches
        self.cache_dir, self.seed, self.num_workers = Path(cache_dir).expanduser(), seed, num_workers
        self.tokenizer = None
        self._dir: Path | None = None

    def _prepared_dir(self) -> tuple[Path, object]:
        docs = self.corpus.load(self.cache_dir)
        key = f"{docs.fingerprint}|{self.tokenizer_kind}|{self.vocab_size_setting}"
        return self.cache_dir / "lm" / hashlib.sha256(key.encode()).hexdigest()[:16], docs

    def prepare_data(self) -> None:
        out, docs = self._prepared_dir()
        if (out / "meta.json").exists():
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".build-"))  # renamed into place when complete
        tok = load_or_train(tmp / "tokenizer.json", self.tokenizer_kind, (t for _, t in docs.train), [EOS], self.vocab_size_setting)
        eos = tok.token_id(EOS)
        meta = {"vocab_size": tok.vocab_size}
        dtype = np.uint16 if tok.vocab_size < 2**16 else np.uint32
        for split, split_docs in (("train", docs.train), ("val", docs.val)):
            ids: list[int] = []
            for _, text in split_docs:  # documents separated by EOS so no window pretends they are one text
                ids += tok.encode(text) + [eos]
            np.asarray(ids, dtype=dtype).tofile(tmp / f"{split}.bin")
            meta[f"{split}_tokens"] = len(ids)
            meta[f"{split}_bytes"] = sum(len(t.encode("utf-8")) + 1 for _, t in split_docs)
        meta["dtype"] = np.dtype(dtype).name
        (tmp / "meta.json").write_text(json.dumps(meta))
        publish_dir(tmp, out, "meta.json")  # a concurrent run (DDP rank, sweep job) that finished first wins

    def setup(self, stage: str | None = None) -> None:
        if self._dir is not None:
            return
        out, docs = self._prepared_dir()
        if not (out / "meta.json").exists():
            self.prepare_data()
        self.meta = json.loads((out / "meta.json").read_text())
        report = docs.report
        for split, split_docs in (("train", docs.train), ("val", docs.val)):
            report.split(split, documents=len(split_docs), characters=sum(len(t) for _, t in split_docs),
                         tokens=self.meta[f"{split}_tokens"])
            if self.meta[f"{split}_tokens"] <= self.block_size + 1:
                names = ", ".join(n for n, _ in split_docs[:5]) + (", ..." if len(split_docs) > 5 else "")
                raise DataError(f"the {split} split ({names}) is {self.meta[f'{split}_tokens']} "
                                f"tokens, too few for windows of data.block_size={self.block_size}; give more text or a "
                                "smaller block_size")
        self.report = report.to_dict()
        report.log()
        self.tokenizer = tokenizer_from_json((out / "tokenizer.json").read_text())
        self.train_tokens = np.memmap(out / "train.bin", dtype=self.meta["dtype"], mode="r")
        self.val_tokens = np.memmap(out / "val.bin", dtype=self.meta["dtype"], mode="r")
        self._dir = out

    @property
    def vocab(self) -> dict[str, int]:
        """What the model needs to know about the data: the one place vocab facts come from."""
        return {"vocab_size": self.tokenizer.vocab_size, "eos_id": self.tokenizer.token_id(EOS)}

    @property
    def val_tokens_per_byte(self) -> float:
        return self.meta["val_tokens"] / self.meta["val_bytes"]

    def _per_device_batch(self) -> int:
        return per_device_batch(self.batch_size, self.trainer)

    def _loader(self, dataset: Dataset, skip: int = 0) -> DataLoader:
        return DataLoader(dataset, batch_size=self._per_device_batch(), sampler=step_ordered_sampler(dataset, self.trainer, skip),
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        """Sample i of the run is window (seed, i); an optimizer step takes batch_size of them (over all devices
        and accumulated micro-batches), so a run resumed at step k skips exactly k * batch_size."""
        t = self.trainer
        by_steps = t is not None and t.max_steps > 0  # else epochs of one pass's worth of windows, the same each epoch
        steps = t.max_steps if by_steps else max(1, len(self.train_tokens) // (self.block_size * self.batch_size))
        done = t.global_step if t is not None else 0
        done = done if by_steps else done % steps  # steps already taken in the epoch this loader serves
        length = max(steps, done + 1) * self.batch_size
        return self._loader(RandomWindows(self.train_tokens, self.block_size, self.seed, length), skip=done * self.batch_size)

    def val_dataloader(self) -> DataLoader:
        n = self.eval_batches * self.batch_size
        return self._loader(RandomWindows(self.val_tokens, self.block_size, self.seed + 1, n))

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()
