"""python -m lab.report <multirun dir | run dirs...> [--out DIR]: report.html and report.md."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.runtime.cli import user_errors_exit


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    from lab.report import build_report  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m lab.report", description="Compare runs side by side.")
    parser.add_argument("paths", nargs="+", type=Path, help="a multirun directory, or run directories")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for report.html and report.md (default: the single directory given, else cwd)")
    args = parser.parse_args(argv)
    html_text, md, runs = build_report(args.paths)
    out = args.out or (args.paths[0] if len(args.paths) == 1 and args.paths[0].is_dir() else Path.cwd())
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").write_text(html_text)
    (out / "report.md").write_text(md)
    print(f"{len(runs)} runs -> {out / 'report.html'} and {out / 'report.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
