"""Re-run a checkpoint's test evaluation with the data and task settings it was trained with, and compare a
translator with another checkpoint or a system output file by sacreBLEU's paired bootstrap."""
from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lab.errors import LabError

log = logging.getLogger("lab")
# outputs_dir's files, kept as lab.export keeps its folder (lab.checkpoints.export_dir): the kind its marker
# names, the setting and what the error lines call them
OUTPUTS = {"kind": "lab.eval outputs", "key": "outputs_dir", "what": "lab.eval's test sentences"}


def _test(ckpt_path: str, cfg: DictConfig):
    """-> (test metrics, the task after its test pass) of one checkpoint."""
    import lightning as L  # noqa: PLC0415
    from hydra.utils import instantiate  # noqa: PLC0415

    from lab.checkpoints.reading import lab_metadata, read_checkpoint  # noqa: PLC0415
    from lab.models import build_model  # noqa: PLC0415
    from lab.runtime.cli.console import single_console  # noqa: PLC0415
    from lab.runtime.inference.predict import pick_device  # noqa: PLC0415

    single_console()  # no third-party adverts
    device = pick_device(cfg.device)  # device=cuda without CUDA: one error line before any work
    ckpt = read_checkpoint(ckpt_path)
    meta = lab_metadata(ckpt, ckpt_path)
    saved = OmegaConf.create(meta["config"])
    if "cache_dir" in saved.get("data", {}):  # this machine's cache, never a directory named by the file
        if saved.data.cache_dir != cfg.paths.cache_dir:
            log.info("data.cache_dir: using %s (the checkpoint's run used %s)", cfg.paths.cache_dir, saved.data.cache_dir)
        saved.data.cache_dir = cfg.paths.cache_dir
    run_cfg = OmegaConf.merge(saved, {"data": cfg.get("data") or {}, "task": cfg.get("task") or {}})
    datamodule = instantiate(run_cfg.data)
    datamodule.prepare_data()
    datamodule.setup("test")
    if datamodule.vocab != meta["vocab"]:
        raise LabError(f"the data now gives vocabulary {datamodule.vocab}, but the checkpoint was trained with "
                       f"{meta['vocab']}; evaluate with the data settings the run used")
    if cfg.get("split", "test") == "valid":  # the split is checked by lab.eval before any work  # e.g. to tune the length penalty on held-out data, not on the test split
        datamodule.use_for_test("val")  # the LM's and MLM's: every token (segment) of the validation text once
        print(f"evaluating {ckpt_path} on the validation split (the metrics below are named test/*)")
    task = instantiate(run_cfg.task, model=build_model(run_cfg.model, meta["vocab"]))
    task.lab_metadata = meta
    task.load_state_dict(ckpt["state_dict"])  # with callbacks=ema: the averaged weights
    trainer = L.Trainer(accelerator=device.type, devices=1, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, precision=run_cfg.trainer.get("precision", "32-true"))
    results = trainer.test(task, datamodule=datamodule)
    return {k: float(v) for k, v in (results[0] if results else {}).items()}, task


def evaluate(cfg: DictConfig) -> dict[str, float]:
    metrics, task = _test(cfg.ckpt_path, cfg)
    if cfg.get("outputs_dir"):
        write_outputs(task, Path(str(cfg.outputs_dir)).expanduser(), bool(cfg.get("overwrite", False)))
    if cfg.get("compare_to"):
        print(compare(task, str(cfg.ckpt_path), str(cfg.compare_to), cfg, int(cfg.get("bootstrap_samples", 1000))))
    return metrics


def write_outputs(task, directory: Path, overwrite: bool = False) -> None:
    """test.source / test.reference / test.hypothesis: one sentence a line, in the test split's order (what
    another system translates to be compared with compare_to=). Into a new or empty folder or over lab.eval's
    earlier outputs, replaced whole; a folder of other files only with overwrite=true (export_dir.writing)."""
    from lab.checkpoints.export_dir import writing  # noqa: PLC0415

    outputs = task.test_outputs
    if not outputs:
        raise LabError("outputs_dir writes a translator's test sentences; this checkpoint has none")
    with writing(directory, overwrite=overwrite, **OUTPUTS) as tmp:
        for name, column in zip(("source", "reference", "hypothesis"), zip(*outputs)):
            (tmp / f"test.{name}").write_text("".join(line + "\n" for line in column), encoding="utf-8")
    print(f"wrote {len(outputs)} test sentences to {directory}/test.source, test.reference, test.hypothesis")


def _other_hypotheses(other: str, sources: list[str], cfg: DictConfig) -> list[str]:
    """The hypotheses of compare_to: a checkpoint's test pass (on the same test split), or a text file with
    one hypothesis per line in the test split's order."""
    from lab.checkpoints.reading import is_sharded_checkpoint  # noqa: PLC0415

    path = Path(other).expanduser()
    if path.suffix == ".ckpt" or is_sharded_checkpoint(path):
        _, task = _test(other, cfg)
        if [s for s, _, _ in task.test_outputs] != sources:
            raise LabError(f"compare_to={other} was tested on another test split than ckpt_path; compare checkpoints "
                           "trained on the same data")
        return [h for _, _, h in task.test_outputs]
    if not path.is_file():
        raise LabError(f"compare_to={other} does not exist; give a checkpoint (.ckpt) or a file with one hypothesis "
                       "per line, in the order of the test split")
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise LabError(f"compare_to={other} is not valid UTF-8 text ({e}); give one hypothesis per line") from e
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    if len(lines) != len(sources):
        raise LabError(f"compare_to={other} has {len(lines)} lines, but the test split has {len(sources)} sentences; "
                       "give one hypothesis per test sentence, in the test split's order")
    return [line.rstrip("\r") for line in lines]


def compare(task, this: str, other: str, cfg: DictConfig, samples: int = 1000) -> str:
    """sacreBLEU's paired bootstrap resampling (Koehn 2004) of BLEU and chrF, this checkpoint as the baseline,
    with sacreBLEU's signatures. -> the lines to print."""
    from sacrebleu.metrics import BLEU, CHRF  # noqa: PLC0415
    from sacrebleu.significance import PairedTest  # noqa: PLC0415

    outputs = task.test_outputs
    if not outputs:
        raise LabError(f"compare_to compares translations; {this} is not a translator checkpoint (no test outputs)")
    sources, refs, hyps = map(list, zip(*outputs))
    other_hyps = _other_hypotheses(other, sources, cfg)
    signatures, results = PairedTest([("ckpt_path", hyps), ("compare_to", other_hyps)],
                                     {"BLEU": BLEU(tokenize="13a"), "chrF": CHRF()}, [refs], test_type="bs",
                                     n_samples=samples)()
    lines = [f"paired bootstrap resampling (sacreBLEU), {len(refs)} test sentences, baseline ckpt_path={this}, "
             f"compare_to={other}:"]
    for name, (base, system) in ((k, v) for k, v in results.items() if k != "System"):
        lines.append(f"  {name}: ckpt_path {base.score:.2f} (mean {base.mean:.2f} ± {base.ci:.2f}), compare_to "
                     f"{system.score:.2f} (mean {system.mean:.2f} ± {system.ci:.2f}), p = {system.p_value:.4f}")
    lines += [f"  {name}|{signature}" for name, signature in signatures.items()]
    return "\n".join(lines)


BEST_RUNS_FILE = "test_of_best_runs.json"


def best_runs(sweep_dir: Path, metric: str, mode: str) -> tuple[list[tuple[str, Path, float]], list[str]]:
    """The runs of a sweep (or ladder) directory, grouped into variants by their command-line overrides
    (.hydra/overrides.yaml) without seed=, named by those not every run shares; per variant the run whose best `metric` in csv/metrics.csv is lowest
    (mode=min) or highest (max). -> ([(variant, run directory, its best value)], a line per run left out)."""
    import csv  # noqa: PLC0415

    if mode not in ("min", "max"):
        raise LabError(f"mode={mode!r}: choose min (a loss) or max (an accuracy, BLEU)")
    if not sweep_dir.is_dir():
        raise LabError(f"sweep_dir={sweep_dir} is not a directory; give a sweep's directory (hydra.sweep.dir)")
    best: dict[str, tuple[Path, float]] = {}
    left_out = []
    runs = [c.parent for c in sorted(sweep_dir.rglob("config.yaml")) if ".hydra" not in c.parent.parts]
    overrides = {run: [str(o) for o in OmegaConf.load(run / ".hydra" / "overrides.yaml") if not str(o).startswith(
        ("seed=", "hydra."))] if (run / ".hydra" / "overrides.yaml").exists() else [] for run in runs}
    shared = set.intersection(*(set(o) for o in overrides.values())) if runs else set()
    for run in runs:
        variant = " ".join(o for o in overrides[run] if o not in shared)  # what this variant's runs set differently
        values = []
        if (run / "csv" / "metrics.csv").exists():
            with open(run / "csv" / "metrics.csv") as f:
                values = [float(r[metric]) for r in csv.DictReader(f) if r.get(metric)]
        if not values:
            left_out.append(f"{run}: no {metric} in its csv/metrics.csv (a run that never validated); left out")
            continue
        value = min(values) if mode == "min" else max(values)
        if variant not in best or (value < best[variant][1] if mode == "min" else value > best[variant][1]):
            best[variant] = (run, value)
    if not best:
        raise LabError(f"sweep_dir={sweep_dir} holds no run with {metric} in its metrics; give a sweep's directory "
                       "(each job's run directory under it)")
    return [(v, run, value) for v, (run, value) in best.items()], left_out


def evaluate_sweep(cfg: DictConfig) -> list[dict]:
    """The test pass of each variant's best run of a sweep (best_runs): printed, and written to
    <sweep_dir>/test_of_best_runs.json. What `test=false` in a sweep's jobs leaves for later."""
    import json  # noqa: PLC0415

    from lab.checkpoints.reading import resolve_checkpoint  # noqa: PLC0415

    sweep_dir = Path(str(cfg.sweep_dir)).expanduser()
    chosen, left_out = best_runs(sweep_dir, str(cfg.metric), str(cfg.mode))
    for line in left_out:
        print(line)
    print(f"testing the best run of each of {len(chosen)} variant(s) of {sweep_dir} by {cfg.metric} ({cfg.mode})")
    results = []
    for variant, run, value in chosen:
        print(f"{variant or '(one variant)'}: {run} ({cfg.metric} {value:.4f})")
        metrics, _ = _test(str(resolve_checkpoint(run)), cfg)
        results.append({"variant": variant, "run": str(run), cfg.metric: value, **metrics})
        print("  " + ", ".join(f"{k}: {v:.4f}" for k, v in sorted(metrics.items())))
    (sweep_dir / BEST_RUNS_FILE).write_text(json.dumps(results, indent=1))
    print(f"wrote {sweep_dir / BEST_RUNS_FILE}")
    return results
