"""Checkpoint tools: python -m lab.checkpoint consolidate <sharded dir> <out.ckpt> | average <ckpts or run dir> <out.ckpt>"""
from __future__ import annotations

import argparse
from pathlib import Path

from lab.errors import LabError
from lab.runtime.cli.errors import user_errors_exit


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    """python -m lab.checkpoint consolidate | average: one file from an FSDP checkpoint, or the mean of checkpoints."""
    import torch  # noqa: PLC0415

    from lab.checkpoints.averaging import average_checkpoints, last_checkpoints  # noqa: PLC0415
    from lab.checkpoints.reading import is_sharded_checkpoint, read_checkpoint  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m lab.checkpoint", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cons = sub.add_parser("consolidate", help="gather an FSDP sharded checkpoint directory into one .ckpt file")
    cons.add_argument("checkpoint", type=Path, help="<run dir>/checkpoints/<name>.ckpt (a directory)")
    cons.add_argument("output", type=Path, help="the single-file checkpoint to write")
    avg = sub.add_parser("average", help="average the weights of checkpoints (for evaluation and inference)")
    avg.add_argument("inputs", type=Path, nargs="+", help="checkpoint files, or one run directory with --last N")
    avg.add_argument("output", type=Path, help="the averaged .ckpt file to write")
    avg.add_argument("--last", type=int, default=None, help="with a run directory: its N newest step checkpoints")
    args = parser.parse_args(argv)
    if args.command == "average":
        paths = args.inputs
        if args.last is not None:
            if len(paths) != 1 or not paths[0].is_dir():
                raise LabError("--last N takes one run directory: python -m lab.checkpoint average <run dir> out.ckpt --last 5")
            paths = last_checkpoints(paths[0], args.last)
        ckpt = average_checkpoints(paths)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        torch.save(ckpt, args.output)
        print(f"wrote {args.output}: the mean of {len(paths)} checkpoints ({', '.join(p.name for p in paths)})")
        return
    if not is_sharded_checkpoint(args.checkpoint):
        raise LabError(f"{args.checkpoint} is not an FSDP sharded checkpoint directory (no .metadata + meta.pt)")
    ckpt = read_checkpoint(args.checkpoint)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, args.output)
    print(f"wrote {args.output} ({len(ckpt['state_dict'])} tensors)")


if __name__ == "__main__":
    main()
