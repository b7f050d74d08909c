"""Render a saved placement: a text table and a PNG of the graph coloured by device.

Accepts a ``best_placement.json`` written by ``train``, or a bench ``results.jsonl`` with ``--row``
(default: the best row of the file). A record is checked before use: a damaged or hostile file gives one
:class:`~placement_gym.errors.RecordError` naming the problem. A record of a model loaded from a file
holds the file's path and SHA-256, and is shown only on that same file.

Usage:
    placement-gym show runs/DevicePlacement-bert-cpu_dgpu-sim-v0/ppo_gnn-s0/best_placement.json
    placement-gym show results/small/results.jsonl --model resnet50
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from experiments.cli.arguments import module_main
from experiments.cli.parsers.show import add_arguments
from experiments.filenames import file_stem
from experiments.runs import reject_bool
from placement_gym.benchmarks import load_benchmark
from placement_gym.envs.render import placement_figure, placement_table
from placement_gym.errors import PlacementError, RecordError
from placement_gym.platforms import load_platform
from placement_gym.results import json_object
from placement_gym.zoo.loading import file_sha256

_MAX_RECORD_BYTES = 256 * 2**20  # a results file larger than this is not one bench wrote
_Device = Annotated[int, Field(ge=0, lt=2**16), BeforeValidator(reject_bool)]


class PlacementRecord(BaseModel):
    """The fields ``show`` reads from a record (others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    model: Annotated[str, Field(min_length=1, max_length=4096)]
    graph_version: Annotated[int, Field(ge=0)] | None = None
    platform: Annotated[str, Field(min_length=1, max_length=4096)]
    coarsening: Annotated[str, Field(pattern=r"^(ops|fused)(\+k[1-9][0-9]{0,6})?$")]
    placement: list[_Device]
    latency: float | None = None
    method: str | None = None
    agent: str | None = None
    model_path: str | None = None
    model_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    input_shapes: dict[str, list[Annotated[int, Field(ge=1, lt=2**31)]]] | None = None


def _parse(text: str, where: str) -> dict[str, Any]:
    return json_object(text, where, "a placement record")


def _validate(data: dict[str, Any], where: str) -> PlacementRecord:
    try:
        return PlacementRecord.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc']) or 'record'}: {e['msg']}" for e in exc.errors()[:5]]
        raise RecordError(f"{where}: " + "; ".join(problems)) from None


def _read(path: Path) -> str:
    try:
        if path.stat().st_size > _MAX_RECORD_BYTES:
            raise RecordError(f"{path} is larger than {_MAX_RECORD_BYTES >> 20} MiB; not a placement record")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"cannot read {path}: {exc}") from exc


def load_record(path: Path, row: int | None = None, model: str | None = None) -> PlacementRecord:
    """The placement record in ``path`` (a JSON file, or one row of a JSON-lines file).

    For a ``.jsonl`` file, ``row`` indexes the valid rows (after the ``model`` filter; default: the
    row with the lowest latency). Invalid lines are skipped if another row is asked for.

    Raises:
        RecordError: If the file cannot be read, a record is not valid, or ``row`` is out of range.
    """
    text = _read(path)
    if path.suffix != ".jsonl":
        return _validate(_parse(text, str(path)), str(path))
    rows: list[PlacementRecord] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(_validate(_parse(line, f"{path} line {number}"), f"{path} line {number}"))
            except RecordError as exc:
                problems.append(str(exc))
    rows = [r for r in rows if model is None or r.model == model]
    if not rows:
        why = f"; {problems[0]}" if problems else ""
        raise RecordError(f"{path} has no valid rows" + (f" for model {model!r}" if model else "") + why)
    if row is not None:
        if not -len(rows) <= row < len(rows):
            raise RecordError(f"row {row} is out of range: {path} has {len(rows)} valid rows")
        return rows[row]
    return min(rows, key=lambda r: r.latency if r.latency is not None else float("inf"))


def _benchmark(record: PlacementRecord):
    if record.model_path is None:
        return load_benchmark(record.model)
    path = Path(record.model_path)
    if not path.is_file():
        raise RecordError(f"the record's model file {path} does not exist")
    if record.model_sha256 is None or file_sha256(path) != record.model_sha256:
        raise RecordError(f"{path} has changed since the record was made (its SHA-256 differs)")
    return load_benchmark(path, input_shapes=record.input_shapes)


def show(record: PlacementRecord | dict[str, Any], png: Path | None) -> str:
    """Text table of the record's placement; also writes ``png`` if given.

    Raises:
        RecordError: For an invalid record, or a model file that is missing or changed.
        PlacementError: If the placement does not fit this installation's graph or the platform.
    """
    if isinstance(record, dict):
        record = _validate(record, "record")
    bench = _benchmark(record)
    if record.graph_version is not None and bench.version != record.graph_version:
        raise PlacementError(
            f"the placement was made for {record.model} graph version {record.graph_version}, "
            f"but this installation builds version {bench.version}"
        )
    coarse = bench.coarsen_as(record.coarsening)
    placement = np.asarray(record.placement, dtype=np.int64)
    if placement.shape != (coarse.num_groups,):
        raise PlacementError(
            f"placement has {len(placement)} entries, the {record.coarsening} graph {coarse.num_groups} groups"
        )
    platform = load_platform(record.platform)
    if placement.size and placement.max() >= platform.num_devices:
        raise PlacementError(
            f"the placement uses device {int(placement.max())}, platform {platform.name!r} has "
            f"{platform.num_devices} devices"
        )
    latency = float(record.latency) if record.latency is not None else float("inf")
    method = record.method or record.agent or "?"
    text = f"{record.model} on {record.platform} ({record.coarsening}), method {method}\n"
    text += placement_table(coarse, platform, placement, latency)
    if png is not None:
        fig = placement_figure(
            coarse, platform, placement, f"{record.model}: {method}, {latency * 1e3:.2f} ms"
        )
        fig.savefig(png)
    return text


def run_from_args(args: argparse.Namespace) -> None:
    record = load_record(args.path, args.row, args.model)
    png = args.png or args.path.with_name(f"{file_stem(args.path.stem)}_{file_stem(record.model)}.png")
    print(show(record, png))
    print(f"picture: {png}")


def main(argv: list[str] | None = None) -> int:
    return module_main(__doc__, add_arguments, run_from_args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
