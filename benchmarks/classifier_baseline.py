"""A classical baseline for the classifier on the shipped corpus: TF-IDF features + logistic regression, trained
on exactly the train split the encoder classifier trains on (lab.data.classification.load_split: MR, split_seed
0) and scored on the same test split, so the README can say where the encoder stands against it.

    python benchmarks/classifier_baseline.py [--cache ~/.cache/lab] [--split-seed 0]

Features: word 1-2-grams and character 2-5-grams (within word boundaries) of the text as the model sees it
(lab.data.text.normalize_sentence), sublinear tf; C chosen on the validation split from a small grid. Prints
validation and test accuracy and macro-F1. Needs scikit-learn (a dev dependency).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from scipy.sparse import hstack
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score

from lab.data.classification import MovieReviews, load_split
from lab.data.text import normalize_sentence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default="~/.cache/lab")
    parser.add_argument("--split-seed", type=int, default=0)
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
    print(f"MR split_seed={args.split_seed}: train {len(labels['train'])}, val {len(labels['val'])}, test "
          f"{len(labels['test'])} sentences; TF-IDF (word 1-2, char_wb 2-5) + logistic regression, C={c} by val acc")
    print(f"val acc {acc:.4f}; test acc {accuracy_score(labels['test'], test):.4f}, test macro-F1 "
          f"{f1_score(labels['test'], test, average='macro'):.4f} ({time.perf_counter() - t0:.1f}s)")


if __name__ == "__main__":
    main()
