"""Checkpoint tools: python -m lab.checkpoint consolidate <sharded dir> <out.ckpt>"""
from __future__ import annotations

import argparse
from pathlib import Path

from lab.errors import LabError
from lab.runtime.cli import user_errors_exit


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    """python -m lab.checkpoint consolidate <sharded dir> <out.ckpt>: one file from an FSDP checkpoint."""
    import torch  # noqa: PLC0415

    from lab.runtime.checkpoints import is_sharded_checkpoint, read_checkpoint  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m lab.checkpoint", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cons = sub.add_parser("consolidate", help="gather an FSDP sharded checkpoint directory into one .ckpt file")
    cons.add_argument("checkpoint", type=Path, help="<run dir>/checkpoints/<name>.ckpt (a directory)")
    cons.add_argument("output", type=Path, help="the single-file checkpoint to write")
    args = parser.parse_args(argv)
    if not is_sharded_checkpoint(args.checkpoint):
        raise LabError(f"{args.checkpoint} is not an FSDP sharded checkpoint directory (no .metadata + meta.pt)")
    ckpt = read_checkpoint(args.checkpoint)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, args.output)
    print(f"wrote {args.output} ({len(ckpt['state_dict'])} tensors)")


if __name__ == "__main__":
    main()
