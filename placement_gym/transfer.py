"""The transfer track, protocol ``transfer-v1``: pretrain on the train tasks, then place unseen families.

Protocol ``transfer-v1`` (docs/protocol.md, "The transfer track"):

* **Pretraining**: on the 12 train tasks of protocol v1 (:data:`~placement_gym.protocol.TRAIN_TASKS`); a
  method may also use the zoo's pretraining-only families and test models and synthetic graphs
  (:data:`PRETRAIN_MODELS`), never a held-out family. Its budget is stated and recorded in every row
  (:class:`Pretraining`: env steps, evaluations, CPU-seconds); at most :data:`PRETRAIN_CPU_SECONDS`.
* **Evaluation**: every held-out family (:data:`~placement_gym.HELD_OUT_MODELS`) on the held-out platforms
  (but :data:`EXCLUDED`), :data:`BUDGET` distinct placements per run, seeds 0-4; no task-specific training beyond those
  placements (a method may learn from them, as fine-tuning within the run).
* **Score**: protocol v1's normalised score against each task's stored optimum.

Rows carry ``protocol = "transfer-v1"``, ``tier = "transfer"``, the method's track and
``extra["pretraining"]`` (the :class:`Pretraining` record as a dict).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from placement_gym import HELD_OUT_MODELS, HELD_OUT_PLATFORMS
from placement_gym.errors import ConfigError, RecordError
from placement_gym.protocol import HELD_OUT_TASKS, MASKED_TASKS, SEEDS, TRAIN_TASKS, Task
from placement_gym.protocol import VERSION as V1
from placement_gym.record_paths import portable_path

#: Version of the transfer protocol, stored in every row run under it.
VERSION = "transfer-v1"
#: The tier name its rows carry.
TIER = "transfer"
#: Distinct placements per run on a held-out task.
BUDGET = 100
#: Seeds of every seeded method (as in v1).
TRANSFER_SEEDS: tuple[int, ...] = SEEDS
#: Upper limit of a method's pretraining, CPU-seconds (one CPU-hour).
PRETRAIN_CPU_SECONDS = 3600.0
#: Graphs a method may pretrain on besides the train tasks: the pretraining-only families and test models
#: (synthetic graphs, :mod:`placement_gym.synthetic`, are allowed too).
PRETRAIN_MODELS: tuple[str, ...] = (
    "mobilenet_v2", "efficientnet_b0", "gpt2", "tiny_bert", "tiny_cnn", "tiny_vit", "tiny_convnext",
)  # fmt: skip
#: Held-out tasks that are not tasks of transfer-v1: the exact solver had neither closed them nor stored a
#: bound when the track was defined (Swin-T on ``multi-accel``: 404 groups, still solving after 50 minutes
#: on the loaded machine). Adding one later is a new version of the track.
EXCLUDED: tuple[tuple[str, str], ...] = (("swin_t", "multi-accel"),)
#: The evaluation tasks: every held-out family on the held-out platforms, but :data:`EXCLUDED`.
TRANSFER_TASKS: tuple[Task, ...] = tuple(
    Task(m, p, "held-out") for m in HELD_OUT_MODELS for p in HELD_OUT_PLATFORMS if (m, p) not in EXCLUDED
)


@dataclass(frozen=True)
class Pretraining:
    """What a method's pretraining cost, as rows record it (``extra["pretraining"]``).

    Attributes:
        env_steps: Env steps (or placements proposed) during pretraining.
        evaluations: Latency evaluations (simulator calls) during pretraining; ``None`` if not counted.
        cpu_s: CPU-seconds of the pretraining process and its children; ``None`` where only the wall time
            of a single-threaded run was recorded (then ``cpu_s <= wall_s``).
        wall_s: Wall-clock seconds.
        models: The model families it pretrained on.
        platforms: The platforms it pretrained on.
        command: The command that made it.
        source: Where the record was read (a policy's metadata file), relative to the repository.
    """

    env_steps: int
    evaluations: int | None
    cpu_s: float | None
    wall_s: float | None
    models: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    command: str = ""
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["models"], d["platforms"] = list(self.models), list(self.platforms)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pretraining:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["models"] = tuple(known.get("models", ()))
        known["platforms"] = tuple(known.get("platforms", ()))
        return cls(**known)

    @property
    def cpu_bound(self) -> float:
        """The CPU-seconds, or the wall time where only that was recorded (an upper bound on one core)."""
        if self.cpu_s is not None:
            return float(self.cpu_s)
        return float(self.wall_s) if self.wall_s is not None else math.inf


#: The record of a method that does not pretrain (classical baselines and searches).
NO_PRETRAINING = Pretraining(env_steps=0, evaluations=0, cpu_s=0.0, wall_s=0.0)


def check_pretraining(record: Pretraining) -> None:
    """Refuse a pretraining record outside transfer-v1's rules.

    Raises:
        ConfigError: If it used a held-out family or another non-pretraining model, or its CPU time is over
            :data:`PRETRAIN_CPU_SECONDS`.
    """
    allowed = {t.model for t in TRAIN_TASKS} | set(PRETRAIN_MODELS)
    held = [m for m in record.models if m in HELD_OUT_MODELS]
    if held:
        raise ConfigError(f"pretraining used the held-out famil{'y' if len(held) == 1 else 'ies'} "
                          f"{', '.join(held)}: not a {VERSION} entry")  # fmt: skip
    other = [m for m in record.models if m not in allowed]
    if other:
        raise ConfigError(
            f"pretraining used {', '.join(other)}, not a train or pretraining-only model of {VERSION} "
            f"(allowed: {', '.join(sorted(allowed))})"
        )
    if record.cpu_bound > PRETRAIN_CPU_SECONDS:
        raise ConfigError(
            f"pretraining took {record.cpu_bound:.0f} CPU-seconds, over {VERSION}'s {PRETRAIN_CPU_SECONDS:.0f}"
        )


def read_pretraining(path: str | Path) -> Pretraining:
    """A pretraining record from a JSON file: ``pretraining.json`` written by ``placement-gym transfer
    pretrain``, or a shipped policy's ``meta.json`` (its ``training`` section).

    Raises:
        RecordError: If the file is missing or has no pretraining record.
    """
    path = Path(path)
    if not path.is_file():
        raise RecordError(f"{path}: no such pretraining record (write one with `placement-gym transfer pretrain`)")
    data = json.loads(path.read_text())
    if "pretraining" in data:
        return Pretraining.from_dict(data["pretraining"])
    training = data.get("training", data)
    if "env_steps" not in training and "moves" not in training:
        raise RecordError(f"{path}: no pretraining record (no 'pretraining' or 'training' section)")
    wall = training.get("wall_s", training.get("wall_seconds"))
    args = training.get("args", {})
    return Pretraining(
        env_steps=int(training.get("env_steps", training.get("moves", 0))),
        evaluations=training.get("evaluations"),
        cpu_s=training.get("cpu_s"),
        wall_s=wall,
        models=tuple(training.get("models", args.get("models", ()))),
        platforms=tuple(training.get("platforms", args.get("platforms", ()))),
        command=str(training.get("command", data.get("command", ""))),
        source=portable_path(path),
    )


def protocol_tasks(version: str | None) -> tuple[Task, ...]:
    """The tasks a row of protocol ``version`` may be on (``None``: any task, an off-protocol row)."""
    if version == VERSION:
        return TRANSFER_TASKS
    if version == V1:
        return TRAIN_TASKS + HELD_OUT_TASKS + MASKED_TASKS
    return ()


__all__ = [
    "BUDGET", "EXCLUDED", "NO_PRETRAINING", "PRETRAIN_CPU_SECONDS", "PRETRAIN_MODELS", "TIER", "TRANSFER_SEEDS",
    "TRANSFER_TASKS", "VERSION", "Pretraining", "check_pretraining", "protocol_tasks", "read_pretraining",
]  # fmt: skip
