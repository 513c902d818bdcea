"""No W&B step lost when a run is killed and resumed.

A process killed with SIGKILL never flushes the last rows it sent to W&B: its offline segment
(`wandb/offline-run-*/run-<id>.wandb`) stops some steps before the checkpoint the next attempt resumes from,
and no `finish` recorded where it stopped (RunDir.wandb_last_step). The resumed attempt reads the last step
the earlier segments of its W&B run actually hold (their records, in W&B's own LevelDB-log format with
wandb's protobuf messages: wandb has no public reader), and before its first row logs metrics.csv's rows
after that step, once each, in increasing steps (W&B drops a step lower than one already logged)."""
from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

BLOCK = 32768  # LevelDB log: 32 KiB blocks of chunks, each behind a 7-byte header (crc32, length, type)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(run_file: Path) -> list:
    """The protobuf Records of a .wandb file, after its 7-byte file header. A file cut by a kill ends in a
    partial chunk or record: reading stops there (what precedes it is whole)."""
    from google.protobuf.message import DecodeError  # noqa: PLC0415
    from wandb.proto import wandb_internal_pb2  # noqa: PLC0415

    data, records, pending, pos = run_file.read_bytes(), [], b"", 7
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # block trailer too short for a header: the next chunk starts the next block
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 or pos + 7 + length > len(data):
            break
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            try:
                records.append(wandb_internal_pb2.Record.FromString(pending))
            except DecodeError:
                break
    return records


def history_steps(run_file: Path) -> list[int]:
    """The `_step` of every history row a .wandb file holds, in file order."""
    steps = []
    for record in read_records(run_file):
        if record.WhichOneof("record_type") == "history":
            for item in record.history.item:
                if (item.key or "/".join(item.nested_key)) == "_step":
                    steps.append(int(json.loads(item.value_json)))
    return steps


def last_held_step(save_dir: Path, run_id: str) -> int:
    """The last step any earlier local segment of W&B run `run_id` holds (offline-run-* for offline
    attempts, run-* for online ones), or -1."""
    files = [*save_dir.glob(f"wandb/offline-run-*/run-{run_id}.wandb"), *save_dir.glob(f"wandb/run-*/run-{run_id}.wandb")]
    return max((max(steps) for f in files if (steps := history_steps(f))), default=-1)


def rows_between(metrics_csv: Path, after: int, before: int) -> dict[int, dict[str, float]]:
    """metrics.csv's values at steps after < step < before, one dict per step (a step's train and val rows
    merged, as W&B merges the rows logged at one step), steps increasing."""
    if not metrics_csv.is_file():
        return {}
    rows: dict[int, dict[str, float]] = {}
    with open(metrics_csv, newline="") as f:
        for row in csv.DictReader(f):
            step = row.pop("step", "")
            if step.isdigit() and after < int(step) < before:
                rows.setdefault(int(step), {}).update({k: float(v) for k, v in row.items() if v not in ("", None)})
    return dict(sorted(rows.items()))
