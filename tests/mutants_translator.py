"""One-line bugs in the translator's n-best decoding, no-repeat-ngram, validation-BLEU subset and memmapped
pairs that their tests must kill, for the mutation script (tests/mutants.py).

Each entry: name, file (relative to the repository root), a snippet occurring exactly once in that file,
its replacement, and the tests that must fail once it is applied.
"""
from __future__ import annotations

DECODING = "lab/models/decoding.py"
NBEST = ("tests/models/test_decoding_nbest.py",)
VAL_SUBSET = ("tests/tasks/test_translation_bleu.py::test_val_bleu_decodes_the_same_first_sentences_every_validation",)
DATA = ("tests/data/test_translator_data.py",)

MUTANTS = [
    ("n-best: eos at the length limit is free (not at its real log-probability)", DECODING,
     "== eos, logp[forced], float(\"-inf\"))", "== eos, 0.0, float(\"-inf\"))[None]", NBEST),
    ("n-best: hypotheses in finishing order, not best first", DECODING,
     "return [sorted(hyps, key=lambda h: h[1], reverse=True) for hyps in finished]", "return finished", NBEST),
    ("n-best: scores not length-normalised", DECODING,
     "float(top_scores[b, j]) / step**length_penalty", "float(top_scores[b, j])", NBEST),
    ("no-repeat-ngram: the prefix one token too long", DECODING,
     "prefix = row[t - n + 1 :]", "prefix = row[t - n :]", NBEST),
    ("val BLEU subset: one sentence too many", "lab/tasks/translation.py",
     "rows = batch[\"index\"] < n if", "rows = batch[\"index\"] <= n if", VAL_SUBSET),
    ("memmapped pairs: a source loses its last id", "lab/data/parallel.py",
     "self.source[s[i] : s[i + 1]]", "self.source[s[i] : s[i + 1] - 1]", DATA),
]
