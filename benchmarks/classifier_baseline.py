"""A classical baseline for the classifier on the shipped corpus: TF-IDF features + logistic regression, trained
on exactly the train split the encoder classifier trains on (lab.data.classification.load_split: MR, split_seed
0) and scored on the same test split, so the README can say where the encoder stands against it.

    python benchmarks/classifier_baseline.py [--cache ~/.cache/lab] [--split-seed 0] [--runs RUN_DIR ...]

Features: word 1-2-grams and character 2-5-grams (within word boundaries) of the text as the model sees it
(lab.data.sources.text.normalize_sentence), sublinear tf; C chosen on the validation split from a small grid. Prints
validation and test accuracy and macro-F1. Needs scikit-learn (a dev dependency).

--runs: lab.train run directories (or checkpoints) of the encoder classifier on the same data. Each one's best
checkpoint classifies the same test sentences through lab's inference path (lab.runtime.inference.predict.classify, as
`lab.classify` does); their test accuracies (and mean +- sample std) are printed next to the baseline's, and the
difference, so the comparison is computed here, never copied from a log.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from scipy.sparse import hstack
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score

from lab.checkpoints.reading import load_model, resolve_checkpoint, trained_length
from lab.data.classification import MovieReviews, load_split
from lab.data.sources.text import normalize_sentence
from lab.runtime.inference.predict import classify


def encoder_accuracy(run: str, texts: list[str], labels: list[str], split_seed: int) -> float:
    """Test accuracy of a run's best checkpoint on these sentences, predicted as lab.classify predicts."""
    model, tokenizer, meta = load_model(resolve_checkpoint(run))
    data = meta["config"]["data"]
    if "MovieReviews" not in str(data.get("source")) or int(data.get("split_seed", -1)) != split_seed:
        print(f"error: {run} was not trained on MR with split_seed={split_seed}; give a run of "
              "+experiment=encoder_classifier", file=sys.stderr)
        sys.exit(2)
    predicted = classify(model, tokenizer, meta["data"]["labels"], texts, trained_length(meta))
    return accuracy_score(labels, [label for label, _ in predicted])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default="~/.cache/lab")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--runs", nargs="*", default=[], help="encoder classifier run dirs to score on the same test split")
    args = parser.parse_args()
    t0 = time.perf_counter()
    splits, _ = load_split(MovieReviews(), Path(args.cache).expanduser(), args.split_seed)
    texts = {k: [normalize_sentence(t) for t, _, _ in v] for k, v in splits.items()}
    labels = {k: [y for _, y, _ in v] for k, v in splits.items()}
    words = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1)
    chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True, min_df=2)
    x = {"train": hstack([words.fit_transform(texts["train"]), chars.fit_transform(texts["train"])]).tocsr()}
    for k in ("val", "test"):
        x[k] = hstack([words.transform(texts[k]), chars.transform(texts[k])]).tocsr()
    best = None
    for c in (1, 4, 16, 64, 256):
        model = LogisticRegression(C=c, max_iter=2000).fit(x["train"], labels["train"])
        acc = accuracy_score(labels["val"], model.predict(x["val"]))
        print(f"C={c}: val acc {acc:.4f}")
        if best is None or acc > best[0]:
            best = (acc, c, model)
    acc, c, model = best
    test = model.predict(x["test"])
    baseline = accuracy_score(labels["test"], test)
    print(f"MR split_seed={args.split_seed}: train {len(labels['train'])}, val {len(labels['val'])}, test "
          f"{len(labels['test'])} sentences; TF-IDF (word 1-2, char_wb 2-5) + logistic regression, C={c} by val acc")
    print(f"val acc {acc:.4f}; test acc {baseline:.4f}, test macro-F1 "
          f"{f1_score(labels['test'], test, average='macro'):.4f} ({time.perf_counter() - t0:.1f}s)")
    if args.runs:
        accs = []
        for run in args.runs:
            accs.append(encoder_accuracy(run, [t for t, _, _ in splits["test"]], labels["test"], args.split_seed))
            print(f"encoder {run}: test acc {accs[-1]:.4f}")
        std = statistics.stdev(accs) if len(accs) > 1 else 0.0
        print(f"encoder classifier, {len(accs)} run(s): test acc {statistics.mean(accs):.4f} +- {std:.4f} "
              f"(sample std) vs baseline {baseline:.4f}: {100 * (statistics.mean(accs) - baseline):+.2f} points")


if __name__ == "__main__":
    main()
