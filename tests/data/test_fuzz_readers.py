"""Generated JSON-lines files through the language model's data preparation (hypothesis): every outcome is
either a prepared corpus whose counts add up to the input (each non-blank line a document or a counted drop)
or one short DataError line; never another exception, never a line that vanished uncounted. Derandomized with a
fixed number of examples: the same files in every CI run."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from conftest import one_short_line
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.data.corpora import TextFiles
from lab.data.lm import LMDataModule
from lab.errors import DataError

WORDS = st.text(alphabet="abc xyzé\t\u00a0.", max_size=30)
LINES = st.one_of(
    WORDS.map(lambda t: json.dumps({"text": t})),  # a document, or an empty one (whitespace): dropped and counted
    WORDS.map(lambda t: json.dumps({"content": t})),  # another field: a line without a string 'text'
    st.integers().map(lambda n: json.dumps({"text": n})),  # not a string
    st.sampled_from(["", "  ", "{not json", "[1, 2]", "3", "null", '{"text": null}']),
)


GOOD = json.dumps({"text": "enough text for both splits"})


def prepare(lines: list[str], crlf: bool, bad_lines: str) -> LMDataModule:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a.jsonl"
        path.write_bytes(("\r\n" if crlf else "\n").join(lines).encode())
        dm = LMDataModule(TextFiles([str(path)], bad_lines=bad_lines), tokenizer="char", block_size=2, batch_size=1,
                          cache_dir=str(Path(tmp) / "cache"))
        dm.prepare_data()
        dm.setup()
        return dm


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(generated=st.lists(LINES, max_size=40), crlf=st.booleans(), bad_lines=st.sampled_from(["skip", "skip", "error"]))
def test_every_line_is_a_document_or_counted_or_the_file_is_one_error_line(generated, crlf, bad_lines):
    lines = [GOOD] * 3 + generated + [GOOD] * 3  # enough text that most files prepare: the counts are checked
    try:
        dm = prepare(lines, crlf, bad_lines)
    except DataError as e:
        one_short_line(str(e))
        return
    report = dm.report
    documents = sum(s.get("documents", 0) for s in report["splits"].values())
    dropped = sum(e["count"] for e in report["events"] if e["action"] == "dropped")
    assert documents + dropped == sum(1 for line in lines if line.strip()), report["events"]
