"""Masked-language-modelling data: unlabelled text cut into [CLS] ... [SEP] segments, masked by the collator
(the one place masking happens), BERT's rule: choose 15% of the real tokens; of those, 80% -> [MASK],
10% -> a random token, 10% unchanged. Special tokens and padding are never chosen."""
from __future__ import annotations

import hashlib
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

from lab.data.batching import BucketBatchSampler, pad_batch, per_device_batch
from lab.data.classification import BERT_SPECIALS
from lab.data.corpora import Documents
from lab.data.reading import DataReport
from lab.data.text import normalize_sentence
from lab.data.tokenizers import load_or_train
from lab.errors import DataError

IGNORE = -100  # target of positions that were not chosen (F.cross_entropy's ignore_index)


class MaskingCollator:
    """Pads a batch of id lists and masks it. -> (inputs [B, T], targets [B, T]: the original id at chosen
    positions, IGNORE elsewhere). seed=None draws from torch's global RNG (fresh masks every epoch, seeded by
    the run); a seed makes the masks a function of (seed, the batch's sample indices): fixed validation."""

    def __init__(self, pad_id: int, mask_id: int, vocab_size: int, special_ids: list[int], mask_prob: float = 0.15,
                 replace_mask: float = 0.8, replace_random: float = 0.1, seed: int | None = None):
        if not 0 < mask_prob < 1 or replace_mask + replace_random > 1:
            raise DataError(f"data masking: mask_prob={mask_prob} must be in (0, 1) and replace_mask + replace_random "
                            f"= {replace_mask} + {replace_random} at most 1")
        self.pad_id, self.mask_id, self.mask_prob = pad_id, mask_id, mask_prob
        self.replace_mask, self.replace_random, self.seed = replace_mask, replace_random, seed
        self.special = torch.tensor(sorted(set(special_ids) | {pad_id}))
        self.random_ids = torch.tensor([i for i in range(vocab_size) if i not in set(self.special.tolist())])

    def __call__(self, items: list[tuple[int, list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
        indices, seqs = zip(*items)
        gen = None
        if self.seed is not None:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + min(indices))
        ids = pad_batch(seqs, self.pad_id)  # [B, T]
        return self.mask(ids, gen)

    def mask(self, ids: torch.Tensor, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        eligible = ~torch.isin(ids, self.special)  # [B, T]
        chosen = (torch.rand(ids.shape, generator=gen) < self.mask_prob) & eligible
        if not chosen.any():  # a batch without a target has no loss; choose one eligible token
            flat = eligible.flatten().nonzero().squeeze(1)
            chosen.view(-1)[flat[torch.randint(len(flat), (1,), generator=gen)]] = True
        targets = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
        action = torch.rand(ids.shape, generator=gen)
        to_mask = chosen & (action < self.replace_mask)
        to_random = chosen & (action >= self.replace_mask) & (action < self.replace_mask + self.replace_random)
        random_tokens = self.random_ids[torch.randint(len(self.random_ids), ids.shape, generator=gen)]
        inputs = torch.where(to_mask, torch.full_like(ids, self.mask_id), ids)
        inputs = torch.where(to_random, random_tokens, inputs)
        return inputs, targets


class Indexed(torch.utils.data.Dataset):
    """(index, segment) pairs: the collator derives fixed validation masks from the indices."""

    def __init__(self, segments: list[list[int]]):
        self.segments = segments

    def __len__(self) -> int:
        return len(self.segments)

    def __getitem__(self, i: int) -> tuple[int, list[int]]:
        return i, self.segments[i]


def segments_of(docs: list[tuple[str, str]], tok, max_length: int, truncated: list[str] | None = None) -> list[list[int]]:
    """Each document's lines packed greedily into [CLS] ... [SEP] segments of at most max_length tokens;
    a line longer than a segment is truncated (its "document:line" appended to `truncated`). Short texts
    (one sentence) stay one segment each."""
    cls, sep, room = tok.token_id("[CLS]"), tok.token_id("[SEP]"), max_length - 2
    out = []
    for name, text in docs:
        normalized = ((n, normalize_sentence(ln)) for n, ln in enumerate(text.splitlines(), 1))
        lines = [(n, ln) for n, ln in normalized if ln]
        current: list[int] = []
        for (n, _), ids in zip(lines, tok.encode_batch([ln for _, ln in lines])):
            if len(ids) > room and truncated is not None:
                truncated.append(f"{name}:{n}")
            ids = ids[:room]
            if current and len(current) + len(ids) > room:
                out.append([cls, *current, sep])
                current = []
            current += ids
        if current:
            out.append([cls, *current, sep])
    return out


class MLMDataModule(L.LightningDataModule):
    """Fields:
    corpora: unlabelled corpora (lab.data.corpora interface: load(cache_dir) -> Documents), concatenated.
    vocab_size: WordPiece vocabulary, trained on the corpora's train texts (cached).
    max_length: tokens per segment incl. [CLS] / [SEP]. batch_size: GLOBAL segments per step.
    mask_prob / replace_mask / replace_random: the masking rule. eval_batches: validation batches (null: all).
    """
    shards_batches = True  # BucketBatchSampler takes each rank's batches itself (see lab.train)

    def __init__(self, corpora: list, vocab_size: int = 8000, max_length: int = 64, batch_size: int = 64,
                 mask_prob: float = 0.15, replace_mask: float = 0.8, replace_random: float = 0.1,
                 bucketing: bool = True, eval_batches: int | None = 50, cache_dir: str = "~/.cache/lab",
                 seed: int = 1337, num_workers: int = 0):
        super().__init__()
        if not corpora:
            raise DataError("data.corpora is empty; give at least one corpus (e.g. the movie reviews or text_files)")
        self.corpora, self.vocab_size_setting, self.max_length = list(corpora), vocab_size, max_length
        self.batch_size, self.bucketing, self.eval_batches = batch_size, bucketing, eval_batches
        self.masking = {"mask_prob": mask_prob, "replace_mask": replace_mask, "replace_random": replace_random}
        self.cache_dir, self.seed, self.num_workers = Path(cache_dir).expanduser(), seed, num_workers
        self.tokenizer = None

    def _documents(self) -> Documents:
        loaded = [c.load(self.cache_dir) for c in self.corpora]
        key = "|".join(d.fingerprint for d in loaded)
        report = DataReport("mlm")
        for d in loaded:
            report.merge(d.report)
        return Documents([x for d in loaded for x in d.train], [x for d in loaded for x in d.val],
                         hashlib.sha256(key.encode()).hexdigest()[:16], report)

    def _tokenizer(self, docs: Documents):
        key = hashlib.sha256(f"{docs.fingerprint}|wordpiece|{self.vocab_size_setting}".encode()).hexdigest()[:16]
        return load_or_train(self.cache_dir / "mlm" / f"tokenizer-{key}.json", "wordpiece",
                             (t for _, t in docs.train), BERT_SPECIALS, self.vocab_size_setting)

    def prepare_data(self) -> None:
        self._tokenizer(self._documents())

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is not None:
            return
        docs = self._documents()
        self.tokenizer = tok = self._tokenizer(docs)
        self.segments, report = {}, docs.report
        for split, split_docs in (("train", docs.train), ("val", docs.val)):
            truncated: list[str] = []
            self.segments[split] = segs = segments_of(split_docs, tok, self.max_length, truncated)
            if not segs:
                raise DataError(f"the MLM {split} text is empty; check data.corpora")
            report.split(split, documents=len(split_docs), characters=sum(len(t) for _, t in split_docs), segments=len(segs))
            for where in truncated:
                report.note("truncated", split, f"lines longer than data.max_length={self.max_length} tokens (cut)", where)
        self.report = report.to_dict()
        report.log()

    @property
    def vocab(self) -> dict[str, int]:
        t = self.tokenizer
        return {"vocab_size": t.vocab_size, "pad_id": t.token_id("[PAD]"), "mask_id": t.token_id("[MASK]")}

    def collator(self, seed: int | None) -> MaskingCollator:
        t = self.tokenizer
        return MaskingCollator(t.token_id("[PAD]"), t.token_id("[MASK]"), t.vocab_size,
                               [t.token_id(s) for s in BERT_SPECIALS], seed=seed, **self.masking)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        segs = self.segments[split]
        t = self.trainer
        rank, world = (t.global_rank, t.world_size) if t is not None else (0, 1)
        bs = per_device_batch(self.batch_size, t)
        lengths = [len(s) for s in segs] if self.bucketing else [0] * len(segs)  # all equal: plain random batches
        sampler = BucketBatchSampler(lengths, bs, shuffle, self.seed, rank=rank, world=world)
        if shuffle:
            sampler.resume(t)  # a resumed run continues with the batch the interrupted one would have loaded next
        elif self.eval_batches:
            sampler = list(sampler)[: self.eval_batches]
        return DataLoader(Indexed(segs), batch_sampler=sampler, num_workers=self.num_workers,
                          collate_fn=self.collator(None if shuffle else self.seed))

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()
