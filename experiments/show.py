"""Render a saved placement: a text table and a PNG of the graph coloured by device.

Accepts a ``best_placement.json`` written by ``train``, or a bench ``results.jsonl`` with ``--row``
(default: the best row of the file).

Usage:
    placement-gym show runs/DevicePlacementSim-bert-v0/ppo_gnn-s0/best_placement.json
    placement-gym show results/small/results.jsonl --model resnet50
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from placement_gym.benchmarks import load_benchmark
from placement_gym.envs.render import placement_figure, placement_table
from placement_gym.errors import PlacementError
from placement_gym.platforms import load_platform


def load_record(path: Path, row: int | None = None, model: str | None = None) -> dict[str, Any]:
    """The placement record in ``path`` (a JSON file, or one row of a JSON-lines file)."""
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        rows = [r for r in rows if model is None or r["model"] == model]
        if not rows:
            raise PlacementError(f"{path} has no rows" + (f" for model {model!r}" if model else ""))
        if row is not None:
            return rows[row]
        return min(rows, key=lambda r: r["latency"] if r["latency"] is not None else float("inf"))
    return json.loads(path.read_text())


def show(record: dict[str, Any], png: Path | None) -> str:
    """Text table of the record's placement; also writes ``png`` if given."""
    bench = load_benchmark(record["model"])
    if bench.version != record.get("graph_version", bench.version):
        raise PlacementError(
            f"the placement was made for {record['model']} graph version {record['graph_version']}, "
            f"but this installation builds version {bench.version}"
        )
    coarse = bench.coarsen_as(record["coarsening"])
    placement = np.asarray(record["placement"], dtype=np.int64)
    if placement.shape != (coarse.num_groups,):
        raise PlacementError(
            f"placement has {len(placement)} entries, the {record['coarsening']} graph {coarse.num_groups} groups"
        )
    platform = load_platform(record["platform"])
    latency = record.get("latency")
    latency = float(latency) if latency is not None else float("inf")
    method = record.get("method", record.get("agent", "?"))
    text = f"{record['model']} on {record['platform']} ({record['coarsening']}), method {method}\n"
    text += placement_table(coarse, platform, placement, latency)
    if png is not None:
        fig = placement_figure(
            coarse, platform, placement, f"{record['model']}: {method}, {latency * 1e3:.2f} ms"
        )
        fig.savefig(png)
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="best_placement.json or results.jsonl")
    parser.add_argument("--row", type=int, default=None, help="row of a results.jsonl (default: the best)")
    parser.add_argument("--model", default=None, help="only rows of this model (results.jsonl)")
    parser.add_argument("--png", type=Path, default=None, help="picture path (default: next to the input)")


def run_from_args(args: argparse.Namespace) -> None:
    record = load_record(args.path, args.row, args.model)
    png = args.png or args.path.with_name(f"{args.path.stem}_{record['model']}.png")
    print(show(record, png))
    print(f"picture: {png}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    main()
