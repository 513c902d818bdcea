"""Language-modelling data: a corpus tokenized once into token shards (lab.data.shards), served as random
windows for training and validation and as a full pass for the test."""
from __future__ import annotations

import hashlib
import json
import logging
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from lab.data.batching import per_device_batch, step_ordered_sampler
from lab.data.datamodule import LabDataModule
from lab.data.shards import (
    MANIFEST,
    FullPassWindows,
    ShardedTokens,
    TokenShard,
    prepare,
    say_before_caps,
    say_held_out,
    shard_bytes,
    tokenizer_sample,
)
from lab.data.sources.reading import DataReport
from lab.data.tokenizers import (
    Rereadable,
    hf_tokenizer_key,
    load_or_train,
    tokenizer_from_hf_dir,
    tokenizer_from_json,
    training_key,
)
from lab.errors import DataError

log = logging.getLogger("lab")

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


class LMDataModule(LabDataModule):
    """Fields:
    corpus: a corpus object with `.files(cache_dir)` and `.key(files, verify)` (lab.data.corpora).
    tokenizer: char | bpe (byte-level BPE trained on the train split); vocab_size: BPE vocabulary size.
    tokenizer_sample_mb: BPE trains on the first tokenizer_sample_mb MB of the training text, an equal share
    from every training file (null: all of it); the character tokenizer always reads all of it.
    block_size: tokens per window. batch_size: GLOBAL windows per optimizer step; each device loads
    batch_size / (devices * accumulate_grad_batches), so results do not depend on the device count.
    eval_batches: validation batches, a sampled estimate (fixed windows, the same at every validation).
    eval_stride: the test pass scores every test token once in windows of block_size tokens moved by
    eval_stride (null: block_size // 2), so each scored token has at least block_size - eval_stride of context.
    verify: stat (the cache key is each file's name, size and modification time) | content (its bytes' hash).
    shard_mb: MB of token ids per shard; a killed preparation re-does at most the shard being written (the file
    is re-read, not re-tokenized, up to it). Part of the cache key (it changes the shards' layout, not the ids).
    tokenizer_from: a Hugging Face model directory whose tokenizer.json encodes the corpus instead of a trained
    one (fine-tuning an imported model: model.init_from=<the same dir>); tokenizer and vocab_size are then unused.
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
        tokenizer_sample_mb: float | None = 100,
        eval_stride: int | None = None,
        verify: str = "stat",
        tokenizer_from: str | None = None,
        shard_mb: float = 256,
    ):
        super().__init__()
        self.corpus, self.tokenizer_kind, self.vocab_size_setting = corpus, tokenizer, vocab_size
        self.block_size, self.batch_size, self.eval_batches = block_size, batch_size, eval_batches
        self.cache_dir, self.seed, self.num_workers = Path(cache_dir).expanduser(), seed, num_workers
        self.sample_bytes = None if tokenizer_sample_mb is None else int(tokenizer_sample_mb * 1e6)
        self.eval_stride, self.verify = eval_stride or max(1, block_size // 2), verify
        self.tokenizer_from = None if tokenizer_from is None else Path(tokenizer_from).expanduser()
        self.shard_bytes = shard_bytes(shard_mb)
        self._dir: Path | None = None

    def _prepared_dir(self, files: list | None = None) -> tuple[Path, list]:
        files = self.corpus.files(self.cache_dir) if files is None else files
        sample = None if self.tokenizer_kind == "char" else self.sample_bytes
        key = f"{self.corpus.key(files, self.verify)}|{training_key(self.tokenizer_kind)}|{self.vocab_size_setting}|{sample}"
        if self.tokenizer_from is not None:
            key = f"{self.corpus.key(files, self.verify)}|{hf_tokenizer_key(self.tokenizer_from)}"
        key += f"|shard_bytes:{self.shard_bytes}"
        return self.cache_dir / "lm" / hashlib.sha256(key.encode()).hexdigest()[:16], files

    def prepare_data(self) -> None:
        out, files = self._prepared_dir()
        if self.corpus.before_caps is not None:
            say_before_caps(out, self._prepared_dir(self.corpus.before_caps)[0])
        sample = None if self.tokenizer_kind == "char" else self.sample_bytes  # a sampled char set would drop text

        def make_tokenizer(path: Path):
            if self.tokenizer_from is not None:
                tok = tokenizer_from_hf_dir(self.tokenizer_from)
                if tok.token_id(EOS) is None:
                    raise DataError(f"data.tokenizer_from={self.tokenizer_from}: its tokenizer has no {EOS} token, which "
                                    "lab puts between documents; give a GPT-2-style tokenizer (lab's LM exports have it)")
                path.write_text(tok.to_json())
                return tok
            texts = Rereadable(partial(tokenizer_sample, files, sample))
            return load_or_train(path, self.tokenizer_kind, texts, [EOS], self.vocab_size_setting)

        settings = {"tokenizer": self.tokenizer_kind, "vocab_size": self.vocab_size_setting, "tokenizer_sample_bytes": sample}
        if self.tokenizer_from is not None:
            settings = {"tokenizer_from": str(self.tokenizer_from)}
        settings["shard_bytes"] = self.shard_bytes
        settings["held_out"] = self.corpus.held_out
        prepare(out, files, make_tokenizer, partial(TokenShard, eos_token=EOS), settings, self.shard_bytes)

    def setup(self, stage: str | None = None) -> None:
        if self._dir is not None:
            return
        out, _ = self._prepared_dir()
        if not (out / MANIFEST).exists():
            self.prepare_data()
        self.meta = json.loads((out / MANIFEST).read_text())
        report, splits = DataReport.from_dict(self.meta["report"]), self.meta["splits"]
        report.merge(self.corpus.listing)  # files the user listed twice (read once): not in the cached manifest
        for split, facts in splits.items():
            report.split(split, documents=facts["documents"], characters=facts["characters"], tokens=facts["tokens"])
            if not facts["names"] and split != "train":
                raise DataError(f"the {split} split is empty (its part of every file is blank); give "
                                f"data.corpus.{split}_files or a larger data.corpus.{split}_fraction")
            if facts["tokens"] <= self.block_size + 1:
                names = ", ".join(facts["names"][:5]) + (", ..." if len(facts["names"]) > 5 else "")
                fix = report.dropped_hint("data.corpus.") or "give more text or a smaller block_size"
                raise DataError(f"the {split} split{f' ({names})' if names else ''} is {facts['tokens']} tokens, too "
                                f"few for windows of data.block_size={self.block_size}; {fix}")
        self.report = {**report.to_dict(), "prepared": str(out), "manifest": {s: {k: v for k, v in f.items() if k != "names"}
                                                                               for s, f in splits.items()},
                       "held_out": self.corpus.held_out}
        report.log()
        say_held_out(self.corpus.held_out, splits)
        log.info("data: val/* is an estimate from %d sampled windows (data.eval_batches x batch_size); test/* scores "
                 "every token of the %s split once (windows of %d, stride %d)", self.eval_batches * self.batch_size,
                 "test" if "test" in splits else "val (no test split: set data.corpus.test_fraction or test_files)",
                 self.block_size, self.eval_stride)
        self.tokenizer = tokenizer_from_json((out / "tokenizer.json").read_text())
        tokens = {s: ShardedTokens(out, f["shards"], self.meta["dtype"]) for s, f in splits.items()}
        self.train_tokens, self.val_tokens = tokens["train"], tokens["val"]
        self._tokens = tokens
        self.use_for_test("test" if "test" in tokens else "val")
        self._dir = out

    def use_for_test(self, split: str) -> None:
        """The split the test pass scores (lab.eval split=valid: the validation text, every token once)."""
        self.test_split, self.test_tokens = split, self._tokens[split]

    @property
    def vocab(self) -> dict[str, int]:
        """What the model needs to know about the data: the one place vocab facts come from."""
        return {"vocab_size": self.tokenizer.vocab_size, "eos_id": self.tokenizer.token_id(EOS)}

    def tokens_per_byte(self, stage: str) -> float:
        facts = self.meta["splits"][self.test_split if stage == "test" else "val"]
        return facts["tokens"] / facts["bytes"]
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
        """Every test token once (FullPassWindows); rank r of W takes windows r, r + W, ... (none twice, none
        left out: the loss is summed over ranks by the task's metric)."""
        dataset = FullPassWindows(self.test_tokens, self.block_size, self.eval_stride)
        t = self.trainer
        rank, world = (t.global_rank, t.world_size) if t is not None else (0, 1)
        return DataLoader(dataset, batch_size=self._per_device_batch(), sampler=range(rank, len(dataset), world),
                          num_workers=self.num_workers)
