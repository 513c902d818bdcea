"""The inference CLIs (lab.generate / classify / fill_mask / translate / eval) in subprocesses, on tiny models
trained here (one session-scoped run per task, a few dozen steps). Every output is compared with what the
model gives in this process for the text encoded by hand, so a text that did not reach the model exactly
(Hydra's grammar, lost quotes, special ids, misaligned lines, untrained positions) fails."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT, TINY_LM, run_dirs, train
from test_inference import TRICKY

from lab.data.sources.text import normalize_document, normalize_sentence

ENCODER = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "data.batch_size=16", "trainer.max_steps=30",
           "trainer.val_check_interval=15", "trainer.log_every_n_steps=1", "logger.wandb.mode=disabled",
           "callbacks.progress=null"]
TRANSLATOR = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=32", "data.max_tokens=24",
              "data.vocab_size=600", "data.valid_size=40", "data.test_size=40", "data.batch_size=16",
              "data.eval_batch_size=20", "trainer.max_steps=30", "trainer.val_check_interval=15",
              "task.scheduler.warmup_steps=2", "task.test_decoding.max_len_offset=2",
              "task.val_decoding.max_len_offset=2", "logger.wandb.mode=disabled", "callbacks.progress=null"]
# trained lengths deliberately shorter than the position tables: inference must use the trained ones
RUNS = {
    "lm": [*TINY_LM, "callbacks.progress=null"],  # char level, windows of 64
    "classifier": ["+experiment=encoder_classifier", *ENCODER, "model.max_seq_len=32", "data.max_length=24",
                   "data.eval_batches=3"],
    "mlm": ["+experiment=encoder_mlm", *ENCODER, "model.max_seq_len=64", "data.max_length=24", "data.eval_batches=2",
            "data.corpora.1.max_works=2"],
    "translator": ["+experiment=translator_small", *TRANSLATOR],
}
ENTRY = {"lm": "lab.generate", "classifier": "lab.classify", "mlm": "lab.fill_mask", "translator": "lab.translate"}


class Trained:
    def __init__(self, run):
        from lab.checkpoints.reading import load_model, trained_length

        self.run, self.ckpt = run, next((run / "checkpoints").glob("best-*.ckpt"))
        self.model, self.tok, self.meta = load_model(self.ckpt)
        self.length = trained_length(self.meta)


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """name -> Trained, each trained on first use (one run per task per session)."""
    done: dict[str, Trained] = {}

    def get(name: str) -> Trained:
        if name not in done:
            runs = tmp_path_factory.mktemp(name)
            train(RUNS[name], runs, env={"OMP_NUM_THREADS": "1"})
            done[name] = Trained(run_dirs(runs)[-1])
        return done[name]

    return get


def cli(module: str, args: list[str], stdin: str = "", timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def ok(result) -> list[str]:
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split("\n")[:-1]  # every output line ends with "\n"


# ---- hand references: the text encoded here, the model run here ----

def classify_ref(t: Trained, text: str) -> str:
    tok, text = t.tok, normalize_sentence(text)
    ids = [tok.token_id("[CLS]"), *tok.encode(text)[: t.length - 2], tok.token_id("[SEP]")]
    with torch.no_grad():
        p, y = t.model(torch.tensor([ids])).softmax(-1)[0].max(-1)
    return f"{t.meta['data']['labels'][int(y)]}\t{float(p):.3f}\t{text}"


def fill_mask_ref(t: Trained, text: str, top_k: int = 3) -> str:
    tok, text, room = t.tok, normalize_sentence(text), t.length - 2
    pieces = text.split("[MASK]")
    ids = tok.encode(pieces[0])
    for piece in pieces[1:]:
        ids += [tok.token_id("[MASK]"), *tok.encode(piece)]
    columns = []
    for m in [i for i, x in enumerate(ids) if x == tok.token_id("[MASK]")]:
        start = 0 if len(ids) <= room else min(max(0, m - room // 2), len(ids) - room)  # the documented window
        row = [tok.token_id("[CLS]"), *ids[start : start + room], tok.token_id("[SEP]")]
        with torch.no_grad():
            probs = t.model(torch.tensor([row]))[0, m - start + 1].softmax(-1)
        top = probs.topk(top_k)
        columns.append(" ".join(f"{tok.decode([i], skip_special=False)} {p:.3g}"
                                for p, i in zip(top.values.tolist(), top.indices.tolist())))
    return "\t".join([*columns, text])


def translate_ref(t: Trained, text: str) -> str:
    from lab.models.decoding import greedy_translate

    m = t.model
    src = [*t.tok.encode(normalize_sentence(text))[: t.length - 1], m.eos_id]
    (hyp,) = greedy_translate(m, torch.tensor([src]), max_len_ratio=1.5, max_len_offset=3, max_positions=t.length)
    return t.tok.decode(hyp)


def generate_ref(t: Trained, prompt: str, n: int = 12) -> tuple[str, str]:
    """-> (prompt + greedy continuation, the continuation), as lab.generate prints them."""
    from lab.models.decoding import generate

    ids = t.tok.encode(normalize_document(prompt))
    out = generate(t.model, torch.tensor([ids]), n, temperature=0, window=64)[0].tolist()
    return t.tok.decode(out), t.tok.decode(out[len(ids) :])


SETTINGS = {"lm": ["temperature=0", "max_new_tokens=12"], "classifier": [], "mlm": ["top_k=3"],
            "translator": ["beam_size=1", "max_len_offset=3"]}
TEXT_KEY = {"lm": "prompt", "classifier": "text", "mlm": "text", "translator": "text"}


def reference(name: str, t: Trained, text: str) -> str:
    return {"lm": lambda: generate_ref(t, text)[0], "classifier": lambda: classify_ref(t, text),
            "mlm": lambda: fill_mask_ref(t, text), "translator": lambda: translate_ref(t, text)}[name]()


# ---- any text in ----

# every tricky string through every entry point (cheap: one CLI_BATCH process per entry point, below)
CASES = [pytest.param(n, k, id=f"{ENTRY[n]}-{k}") for n in RUNS for k in TRICKY]


def tricky_text(name: str, key: str) -> str:
    return TRICKY[key] if name != "mlm" or "[MASK]" in TRICKY[key] else TRICKY[key] + " [MASK]"


# Runs `python -m <module>`'s own code (exit_with_help, take_text_arguments, Hydra, the run) once per command
# line, each given as <n> <its n arguments> on this process's real argv, so every text still arrives through
# a real command line as typed; one process serves every case of a task, paying the ~5 s of imports once.
CLI_BATCH = r"""
import contextlib, io, json, runpy, sys
module, argv, results = sys.argv[1], sys.argv[2:], []
while argv:
    n = int(argv[0])
    sys.argv, argv = [module, *argv[1 : 1 + n]], argv[1 + n :]
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    results.append({"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print("RESULTS=" + json.dumps(results))
"""


@pytest.fixture(scope="session")
def typed(trained, request):
    """name -> {key: the CLI's result (returncode, stdout, stderr) for TRICKY[key] given as its text= argument},
    for every selected case of that task, all from one CLI_BATCH process."""
    done: dict[str, dict[str, SimpleNamespace]] = {}

    def get(name: str) -> dict[str, SimpleNamespace]:
        if name not in done:
            t = trained(name)
            keys = [item.callspec.params["key"] for item in request.session.items
                    if item.originalname == "test_text_reaches_the_model_exactly_as_typed" and item.callspec.params["name"] == name]
            argv = []
            for key in keys:
                args = [f"ckpt_path={t.ckpt}", f"{TEXT_KEY[name]}={tricky_text(name, key)}", *SETTINGS[name]]
                argv += [str(len(args)), *args]
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
            out = subprocess.run([sys.executable, "-c", CLI_BATCH, ENTRY[name], *argv], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=600)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULTS=")), None)
            assert line, out.stdout[-3000:] + out.stderr[-3000:]
            results = json.loads(line.removeprefix("RESULTS="))
            done[name] = {key: SimpleNamespace(**r) for key, r in zip(keys, results, strict=True)}
        return done[name]

    return get


@pytest.mark.parametrize(("name", "key"), CASES)
def test_text_reaches_the_model_exactly_as_typed(trained, typed, name, key):
    t = trained(name)
    text = tricky_text(name, key)
    lines = ok(typed(name)[key])
    assert "\n".join(lines) == reference(name, t, text)
    if name in ("classifier", "mlm"):  # they echo the text as the model read it
        assert lines[0].endswith("\t" + normalize_sentence(text))


# ---- stdin and files: one output line per input line ----

LONG = "a film " * 40  # longer than every trained length here
LINES = ["a gorgeous, moving film", "", "   ", "it's [PAD] </s> the \"worst\" [MASK] ever", "\t", "-- x = [y]",
         LONG + "[MASK] and " + LONG + "[MASK] end"]


@pytest.mark.parametrize(("name", "source"), [
    *[(name, "stdin_no_final_newline") for name in RUNS],
    ("classifier", "file_final_newline"),
    *[pytest.param(name, "file_final_newline", marks=pytest.mark.slow) for name in ("mlm", "translator", "lm")],
])
def test_every_input_line_gives_one_output_line_in_order(trained, tmp_path, name, source):
    t = trained(name)
    lines = LINES * 10  # 70 lines, 40 of them texts: more than a few dozen, so a progress bar shows on stderr
    data = "\n".join(lines) + ("\n" if source.startswith("file") else "")
    args = [f"ckpt_path={t.ckpt}", *SETTINGS[name]]
    if source.startswith("file"):
        path = tmp_path / "in put, [1].txt"  # a path Hydra could not parse either
        path.write_text(data, encoding="utf-8")
        args.append(f"{'input_file' if name == 'translator' else 'file'}={path}")
        data = ""
    result = cli(ENTRY[name], args, stdin=data)
    out = ok(result)
    assert len(out) == len(lines)
    for line, got in zip(lines, out):
        if name == "lm":  # one JSON object per prompt line
            row = json.loads(got)
            want = [] if not line.strip() else [generate_ref(t, line)[1]]
            assert row == {"prompt": line, "completions": want}
        else:
            assert got == ("" if not line.strip() else reference(name, t, line))
    assert "30 of 70 input lines are blank" in result.stderr
    assert "40/40" in result.stderr  # the progress bar, on stderr only
    added = {"classifier": 2, "mlm": 2, "translator": 1}.get(name)  # [CLS] + [SEP], or </s>
    if added:
        long = sum(len(t.tok.encode(normalize_sentence(line))) + added > 24 for line in lines if line.strip())
        assert long >= 10 and f"{long} of 40 texts are longer than the 24 tokens" in result.stderr
    if name == "mlm":
        assert "each [MASK] was predicted from a 24-token window around it" in result.stderr
        assert "20 of 40 texts have no [MASK]" in result.stderr


def test_a_handful_of_lines_shows_no_progress_bar(trained):
    t = trained("classifier")
    result = cli("lab.classify", [f"ckpt_path={t.ckpt}"], stdin="one\ntwo\n")
    assert len(ok(result)) == 2 and "/2" not in result.stderr


def test_a_long_prompt_conditions_on_the_trained_window_and_says_so(trained):
    t = trained("lm")
    prompt = "ROMEO. " * 20  # 140 characters > the 64 the char model was trained on
    out = ok(cli("lab.generate", [f"ckpt_path={t.ckpt}", f"prompt={prompt}", *SETTINGS["lm"]]))
    assert "\n".join(out) == generate_ref(t, prompt)[0]
    assert len(t.tok.encode(prompt)) == 140 and t.length == 64


# ---- interactive generation ----

def test_interactive_generation_answers_each_prompt_before_the_next_is_typed(trained):
    """Sampled (not greedy, so each prompt gets its own answer), seeded: the reference draws from one generator
    across the prompts as the CLI does, and stops at <|endoftext|> as the chat loop does."""
    from lab.models.decoding import generate

    t = trained("lm")
    generator = torch.Generator().manual_seed(1337)  # the CLI's seed
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "lab.generate", f"ckpt_path={t.ckpt}", "interactive=true",
                             "temperature=1", "top_k=null", "max_new_tokens=24"], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        answers = []
        for prompt in ("ROMEO, where art thou?", "JULIET: 'tis \"late\""):
            ids = t.tok.encode(prompt)
            out = generate(t.model, torch.tensor([ids]), 24, temperature=1.0, top_k=None, generator=generator,
                           eos_id=t.meta["vocab"]["eos_id"], window=64)[0].tolist()
            want = t.tok.decode(out[len(ids) :]) + "\n"  # the sample (may hold line breaks), then a line break
            proc.stdin.write(prompt + "\n")
            proc.stdin.flush()
            answers.append(proc.stdout.read(len(want)))  # arrives while stdin is still open
            assert answers[-1] == want, proc.stderr.read() if proc.poll() is not None else ""
        assert answers[0] != answers[1]
        proc.stdin.close()  # Ctrl-D
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()


# ---- a run directory is enough ----

def test_a_run_directory_uses_its_best_checkpoint_else_last_and_says_which(trained, tmp_path):
    t = trained("classifier")
    result = cli("lab.classify", [f"ckpt_path={t.run}", "text=a fine film"])
    assert ok(result) == [classify_ref(t, "a fine film")] and f"using {t.ckpt} (the run's best checkpoint)" in result.stderr
    only_last = tmp_path / "run"
    (only_last / "checkpoints").mkdir(parents=True)
    shutil.copy(t.run / "checkpoints" / "last.ckpt", only_last / "checkpoints" / "last.ckpt")
    result = cli("lab.classify", [f"ckpt_path={only_last}", "text=a fine film"])
    assert result.returncode == 0 and "last.ckpt (the run's last checkpoint; it has no best-*.ckpt)" in result.stderr


def test_eval_takes_a_run_directory(trained):
    t = trained("classifier")
    result = cli("lab.eval", [f"ckpt_path={t.run}"])
    assert result.returncode == 0 and "test/acc: " in result.stdout, result.stderr[-2000:]
    assert f"using {t.ckpt}" in result.stderr


# ---- refused with one line, exit 2, before any model is loaded ----

def _refused(module: str, arg: str, message: str, slow: bool = False):
    return pytest.param(module, [arg], message, id=f"{module}-{arg}", marks=(pytest.mark.slow,) if slow else ())


REFUSED = [
    _refused("lab.generate", "temperature=-1", "temperature=-1 is out of range: temperature must be a number >= 0"),
    _refused("lab.generate", "top_p=1.5", "top_p=1.5 is out of range: top_p must be a number in (0, 1]"),
    _refused("lab.generate", "max_new_tokens=-5", "max_new_tokens=-5 is out of range: max_new_tokens must be an integer >= 1"),
    _refused("lab.translate", "length_penalty=nan", "length_penalty=nan is out of range: length_penalty must be a finite number"),
    _refused("lab.translate", "n_best=6", "n_best=6 is out of range: beam search keeps beam_size=5 hypotheses"),
    # lab.eval's settings: they were checked after the data was prepared (the cache written) and the test run
    _refused("lab.eval", "split=train", "split='train': evaluate the test or the valid split; write split=test or split=valid"),
    _refused("lab.eval", "bootstrap_samples=0", "bootstrap_samples=0 must be an integer >= 1"),
    _refused("lab.eval", "outputs_dir=pyproject.toml", "outputs_dir=pyproject.toml is a file"),
    # the ranges themselves are tested in test_inference.py
    _refused("lab.generate", "top_k=0", "top_k=0 is out of range: top_k must be an integer >= 1, or null", slow=True),
    _refused("lab.generate", "num_samples=0", "num_samples=0 is out of range", slow=True),
    _refused("lab.translate", "beam_size=0", "beam_size=0 is out of range: beam_size must be an integer >= 1", slow=True),
]


@pytest.mark.parametrize(("module", "args", "message"), REFUSED)
def test_bad_settings_are_one_error_line_before_the_checkpoint_is_read(module, args, message):
    text = {"lab.generate": ["prompt=x"], "lab.eval": []}.get(module, ["text=x"])
    result = cli(module, ["ckpt_path=/no/such/run", *text, *args])
    (line,) = result.stderr.splitlines()
    assert result.returncode == 2 and line.startswith("error: ") and message in line and "/no/such/run" not in result.stderr  # settings first: nothing was read


@pytest.mark.parametrize(("name", "entry", "args", "message"), [
    ("lm", "lab.classify", ["text=x"], "is a LanguageModelTask checkpoint, but lab.classify needs a ClassificationTask one; use lab.generate"),
    ("translator", "lab.generate", ["prompt=x"], "is a TranslationTask checkpoint, but lab.generate needs a LanguageModelTask one; use lab.translate"),
    ("classifier", "lab.classify", ["text="], 'text="" is empty'),
    ("translator", "lab.translate", ["text=   "], 'text="   " is empty'),
    ("mlm", "lab.fill_mask", ["text=a [MASK] film", "top_k=100000"], "top_k=100000 is out of range: top_k must be an integer from 1 to the vocabulary size"),
    ("mlm", "lab.fill_mask", ["text=a film"], "the text has no [MASK]"),
], ids=["classify_an_lm", "generate_with_a_translator", "empty_text", "whitespace_text", "top_k_above_vocabulary", "no_mask"])
def test_wrong_checkpoints_and_empty_texts_are_one_error_line(trained, name, entry, args, message):
    result = cli(entry, [f"ckpt_path={trained(name).ckpt}", *args])
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and message in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
