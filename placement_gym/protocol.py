"""The benchmark protocol: what a comparable result on the suite is (versioned; docs/protocol.md).

Protocol ``v1``:

* **Budget**: a tier's number of *distinct* placements a method may evaluate per run (a repeat within the
  run is answered from the run's memo at no cost, :meth:`~placement_gym.problem.PlacementProblem.start_run`);
  the problem refuses a new placement past it. Tiers: ``tiny`` = 100, ``standard`` = 500, ``large`` = 5,000.
* **Seeds**: 0, 1, 2, 3, 4 (a seedless method, e.g. HEFT, gives the same row for each).
* **Tasks**: ``train``, the 12-task suite (3 zoo models x 4 simulated platforms, fused coarsening), and
  ``held-out``, the held-out families ViT-B/16 and ConvNeXt-T (:data:`V1_HELD_OUT_MODELS`) on the two
  platforms they have optima for. Held-out models
  are never trained on: :func:`check_trainable` refuses them in the project's training entry points.
  ``masked``: ``resnet50`` on ``cpu-igpu-lowmem`` and ``whisper_tiny`` on ``cpu-igpu-carveout``, whose memory
  masks block (group, device) pairs (on the other tasks they block none, so masked learners equal their
  unmasked ablations there).
  Learned methods may also pretrain on the zoo's pretraining-only families (``mobilenet_v2``,
  ``efficientnet_b0``, ``gpt2``), which are never tasks.
* **Score**: the normalised score of the returned placement's simulated latency against the task's stored
  proven optimum (:mod:`placement_gym.tasks`): 0 = the best single device, 1 = the optimum.

Changing any of this is a new protocol version (:data:`VERSION`); rows carry the version in their cell key,
so results of two versions never mix.
"""

from __future__ import annotations

from dataclasses import dataclass

from placement_gym import (
    BENCHMARK_MODELS, HELD_OUT_MODELS, HELD_OUT_PLATFORMS, MASKED_TASK_PAIRS, SIM_PLATFORM,
    SUITE_PLATFORMS,
)  # fmt: skip
from placement_gym.errors import ConfigError, UnknownNameError

#: Version of this protocol, stored in every row run under it.
VERSION = "v1"
#: Target evaluations (distinct placements per run) of each tier.
TIERS: dict[str, int] = {"tiny": 100, "standard": 500, "large": 5_000}
#: Seeds of every seeded method.
SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
#: Registered methods whose result does not depend on the seed: each runs once per task (seed 0), and that
#: row counts for every seed. Any other method's runs are its seeds' rows, never repeated.
SEEDLESS: frozenset[str] = frozenset(
    {"single_device", "heft", "m_topo", "m_etf", "m_sct", "milp", "moirai", "exact"}
)
#: Backend and coarsening of every protocol task.
BACKEND, COARSENING = "simulated", "fused"
#: The model families of the train split, and the platforms each is placed on (the held-out families,
#: :data:`~placement_gym.HELD_OUT_MODELS`, are placed on :data:`~placement_gym.HELD_OUT_PLATFORMS`).
TRAIN_MODELS: tuple[str, ...] = BENCHMARK_MODELS
TRAIN_PLATFORMS: tuple[str, ...] = (SIM_PLATFORM, *SUITE_PLATFORMS)


@dataclass(frozen=True)
class Task:
    """One protocol task: a zoo model on a platform (simulated backend, fused coarsening).

    Attributes:
        model: Zoo model name.
        platform: Platform name.
        split: ``"train"``, ``"held-out"`` or ``"masked"``.
    """

    model: str
    platform: str
    split: str

    @property
    def name(self) -> str:
        """``model/platform``, as ``--tasks`` accepts it."""
        return f"{self.model}/{self.platform}"


TRAIN_TASKS: tuple[Task, ...] = tuple(Task(m, p, "train") for m in TRAIN_MODELS for p in TRAIN_PLATFORMS)
#: The held-out families of protocol v1's ``held-out`` split. Families added to
#: :data:`~placement_gym.HELD_OUT_MODELS` later are kept out of training too, but are tasks of the transfer
#: track only (:mod:`placement_gym.transfer`), so v1's split and its rows keep their meaning.
V1_HELD_OUT_MODELS: tuple[str, ...] = ("vit_b16", "convnext_t")
HELD_OUT_TASKS: tuple[Task, ...] = tuple(
    Task(m, p, "held-out") for m in V1_HELD_OUT_MODELS for p in HELD_OUT_PLATFORMS
)
#: Tasks whose memory masks block (group, device) pairs: a split of their own, so that the train split (and
#: every result on it) stays as it was.
MASKED_TASKS: tuple[Task, ...] = tuple(Task(m, p, "masked") for m, p in MASKED_TASK_PAIRS)
SPLITS: dict[str, tuple[Task, ...]] = {"train": TRAIN_TASKS, "held-out": HELD_OUT_TASKS, "masked": MASKED_TASKS}


def tier_budget(tier: str) -> int:
    """The budget of ``tier``.

    Raises:
        UnknownNameError: If ``tier`` is not one of :data:`TIERS`.
    """
    if tier not in TIERS:
        raise UnknownNameError("tier", tier, TIERS)
    return TIERS[tier]


def resolve_tasks(selection: list[str] | tuple[str, ...] | None = None) -> list[Task]:
    """The tasks named by ``selection``: split names (``train``, ``held-out``, ``masked``) and task names
    (``model/platform``), in order, without repeats; ``None`` or empty: the train split.

    Raises:
        UnknownNameError: For a name that is neither a split nor a protocol task.
    """
    known = {t.name: t for t in TRAIN_TASKS + HELD_OUT_TASKS + MASKED_TASKS}
    out: dict[str, Task] = {}
    for item in selection or ["train"]:
        if item in SPLITS:
            out.update((t.name, t) for t in SPLITS[item])
        elif item in known:
            out[item] = known[item]
        else:
            raise UnknownNameError("protocol task or split", item, [*SPLITS, *known])
    return list(out.values())


def check_trainable(models: list[str] | tuple[str, ...] | str) -> None:
    """Refuse to train on a held-out model family (the protocol keeps them for zero-shot tests).

    Raises:
        ConfigError: If any of ``models`` is in :data:`HELD_OUT_MODELS`.
    """
    names = [models] if isinstance(models, str) else list(models)
    held = [m for m in names if m in HELD_OUT_MODELS]
    if held:
        raise ConfigError(
            f"{', '.join(held)} {'is a' if len(held) == 1 else 'are'} held-out model "
            f"famil{'y' if len(held) == 1 else 'ies'} of protocol {VERSION}: never used for training "
            f"(train on {', '.join(TRAIN_MODELS)}, the pretraining-only families or the tiny test models; "
            "evaluate held-out families "
            "zero-shot with `placement-gym bench --tier ... --tasks held-out`)"
        )
