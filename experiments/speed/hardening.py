"""What the file and crash guards of docs/hardening.md cost: refusing a YAML alias bomb, and reading a new
model's fusions in a child process instead of in-process.

Usage::

    python -m experiments.speed.hardening [--model tiny_bert] [--repeats 3]

Prints one JSON object: the machine's load (``os.getloadavg``), the CPU seconds this process spent refusing
a 544-byte "billion laughs" platform file (9 levels of 9 aliases: 9**9 strings once expanded), and for the
model's IR the wall seconds of reading its fusions in-process and in a child process (first call, then a
memoised repeat), each the median of ``--repeats`` runs. Wall times include the child's start (a new
Python process importing OpenVINO), so they depend on the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def bomb_text(levels: int = 9, width: int = 9) -> str:
    """A platform file whose ``description`` is a "billion laughs" alias bomb."""
    lines = ["l0: &l0 [" + ", ".join(['"lol"'] * width) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nname: bomb\ndescription: *l{levels - 1}\ndevices: []\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny_bert", help="zoo model whose IR is read")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    from placement_gym import fusion
    from placement_gym.errors import ConfigError
    from placement_gym.platforms import load_platform
    from placement_gym.zoo import load_model
    from placement_gym.zoo.loading import ir_path

    out: dict = {"load_1min_at_start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bomb.yaml"
        path.write_text(bomb_text())
        start = time.process_time()
        try:
            load_platform(path)
        except ConfigError as exc:
            out["bomb_message_chars"] = len(str(exc))
        out["bomb_bytes"] = path.stat().st_size
        out["bomb_refused_cpu_s"] = round(time.process_time() - start, 4)

    model = load_model(ir_path(args.model)).model

    def wall(fn) -> float:
        times = []
        for _ in range(args.repeats):
            fusion._ISOLATED.clear() if fn is not memo else None
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return round(statistics.median(times), 3)

    def in_process() -> None:
        fusion.runtime_fused_layers(model)

    def isolated() -> None:
        fusion.isolated_fused_layers(model)

    def memo() -> None:
        fusion.isolated_fused_layers(model)

    out["model"] = args.model
    out["fusions_in_process_wall_s"] = wall(in_process)
    out["fusions_child_process_wall_s"] = wall(isolated)
    out["fusions_memoised_wall_s"] = wall(memo)
    out["load_1min_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
