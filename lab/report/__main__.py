"""python -m lab.report <multirun dir | run dirs | globs> [--baseline V] [--metric M] [--budget common|finished]
[--value final|best] [--scaling auto|on|off] [--out DIR] [--watch] [--serve [PORT]] [--transfer]"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lab.errors import LabError
from lab.runtime.cli.errors import user_errors_exit

MARKERS = {"report.html": '<meta name="generator" content="lab.report">', "report.md": "<!-- written by lab.report -->"}


def check_writable(out: Path, force: bool) -> None:
    """Never replace a report.html / report.md that lab.report did not write, unless asked."""
    for name, marker in MARKERS.items():
        f = out / name
        if f.is_file() and not force and marker not in f.read_text(errors="replace")[:4096 if name == "report.md" else 600]:
            raise LabError(f"{f} exists and was not written by lab.report; pass --out <another dir>, or --force to replace it")


def out_dir(args) -> Path:
    """--out, else the single directory given, else the cwd."""
    return args.out or (args.paths[0] if len(args.paths) == 1 and args.paths[0].is_dir() else Path.cwd())


def render(args, served: bool = False) -> Path:
    """served: the page reloads itself when the report changes (--serve)."""
    from lab.report import collect, html, markdown  # noqa: PLC0415 - plotly and scipy load after parsing

    t0 = time.perf_counter()
    report = collect(args.paths, args.metric, args.baseline, args.budget, args.value, tuple(args.ignore),
                     scaling_view=args.scaling, label=args.label)
    out = out_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    check_writable(out, args.force)
    live = args.watch and any(r.status == "running" for r in report.runs)
    (out / "report.html").write_text(html.render(report, live=live, served=served))
    (out / "report.md").write_text(markdown.render(report))
    states = {}
    for r in report.runs:
        states[r.status] = states.get(r.status, 0) + 1
    print(f"{len(report.runs)} runs ({', '.join(f'{n} {s}' for s, n in states.items())}) in {len(report.variants)} variants"
          f" -> {out / 'report.html'} and {out / 'report.md'} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    for s in report.skipped:
        print(f"not shown: {s.path}: {s.reason}", file=sys.stderr)
    if args.wandb != "off":
        from lab.report.wandb_table import log_tables  # noqa: PLC0415

        log_tables(report, required=args.wandb == "on")
    return out


def _signature(paths: list[Path]) -> tuple:
    """What changes when any run writes: every file's (path, mtime, size) under the given paths (globs
    matched again each time: a sweep's new job directories count)."""
    from lab.report.runs import expand  # noqa: PLC0415

    files = []
    try:
        expanded = expand(paths)
    except LabError:  # a glob matching nothing yet
        return ()
    for p in expanded:
        for f in [p] if p.is_file() else p.rglob("*"):
            if f.name in ("metrics.csv", "config.yaml", "status.json", "train.log", "hparams.yaml"):
                st = f.stat()
                files.append((str(f), st.st_mtime_ns, st.st_size))
    return tuple(sorted(files))


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.report", description="Review runs: seeds grouped into variants, "
                                     "differences tested against seed noise, interactive offline charts.")
    parser.add_argument("paths", nargs="+", type=Path, help="multirun directories, run directories, or globs of them")
    parser.add_argument("--metric", default=None, help="the metric to rank and test (default: the runs' optimized_metric, else val/loss)")
    parser.add_argument("--baseline", default=None, help="the variant the others are compared with (default: the first given)")
    parser.add_argument("--budget", choices=("common", "finished"), default="common",
                        help="common: every run at the largest step all runs with a value reached (default); "
                             "finished: finished runs only, each at its end")
    parser.add_argument("--value", choices=("final", "best"), default="final",
                        help="each run's last value of the metric at the budget, or its best value up to it")
    parser.add_argument("--ignore", action="extend", nargs="+", default=[], metavar="KEY",
                        help="config keys that do not make a variant (a key ending in '.' names every key under it), "
                             "e.g. settings added or moved between the lab versions that wrote the runs; the report "
                             "names them and their values")
    parser.add_argument("--scaling", choices=("auto", "on", "off"), default="auto",
                        help="the scaling view (loss vs compute, fitted laws, compute multipliers; docs/ladders.md): "
                             "auto = when the runs differ in size")
    parser.add_argument("--label", default=None,
                        help="the name of the choice made of keys that change together (two presets, a recipe against "
                             "its baseline); default: 'experiment' when the runs' names tell them apart")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for report.html and report.md (default: the single directory given, else cwd)")
    parser.add_argument("--force", action="store_true", help="replace report files in --out that lab.report did not write")
    parser.add_argument("--watch", action="store_true", help="re-render whenever a run writes (Ctrl-C stops)")
    parser.add_argument("--serve", type=int, nargs="?", const=8000, default=None, metavar="PORT",
                        help="serve the report on http://127.0.0.1:PORT/report.html (default 8000; 0: any free port) "
                             "and re-render as runs write, like --watch; the open page reloads itself when it changed")
    parser.add_argument("--wandb", choices=("auto", "on", "off"), default="auto",
                        help="log the tables to W&B under the sweep's group: auto = when the runs logged to W&B")
    parser.add_argument("--transfer", action="store_true", help="instead: loss against log2(lr), a curve per width, sp "
                        "beside mup, and the best lr per width (lab.report.transfer) -> transfer.html, transfer.md")
    args = parser.parse_args(argv)
    if args.transfer:
        from lab.report.transfer import render as transfer  # noqa: PLC0415

        print("wrote", *transfer(args.paths, out_dir(args), args.metric or "val/loss"), file=sys.stderr)
        return
    server = None
    if args.serve is not None:
        from lab.report import serve  # noqa: PLC0415

        server = serve.bind(out_dir(args), args.serve)  # a port in use: one line, nothing written
        args.watch = True
    render(args, served=server is not None)
    if server is not None:
        print(f"serving {serve.start(server)} (re-rendered as runs write; Ctrl-C stops)", file=sys.stderr, flush=True)
    if args.watch:
        seen = _signature(args.paths)
        try:
            while True:
                time.sleep(2)
                now = _signature(args.paths)
                if now != seen:
                    seen = now
                    render(args, served=server is not None)
                    if server is not None:
                        serve.changed(server)  # the open pages hear of it now
        except KeyboardInterrupt:
            pass
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()


if __name__ == "__main__":
    main()
