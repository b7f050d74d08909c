"""A result is scored against the reference optimum of its task's CONTENT (model, graph version, level,
groups and every platform figure), never of a name: a platform file that keeps a built-in name with other
figures gets no score, a renamed copy of a built-in platform gets the built-in's."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from experiments.records.report import summarise
from experiments.runs import ResultRow
from placement_gym.platforms import Link, load_platform
from placement_gym.problem import PlacementProblem
from placement_gym.tasks import reference_for, reference_optimum, task_sha256

BUILTIN = Path(__file__).parents[2] / "placement_gym" / "platforms" / "cpu-igpu.yaml"


def _platform_file(tmp_path: Path, name: str, scale_bandwidth: float = 1.0) -> Path:
    spec = yaml.safe_load(BUILTIN.read_text())
    spec["name"], spec["description"], spec["sources"] = name, "my copy", []
    spec["devices"][0]["mem_bandwidth"] = float(spec["devices"][0]["mem_bandwidth"]) * scale_bandwidth
    path = tmp_path / f"{name}-{scale_bandwidth}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def problems(tmp_path_factory) -> dict[str, PlacementProblem]:
    tmp = tmp_path_factory.mktemp("platforms")
    files = {
        "builtin": "cpu-igpu",
        "renamed": _platform_file(tmp, "my-igpu"),
        "same name, other figures": _platform_file(tmp, "cpu-igpu", scale_bandwidth=2.0),
    }
    return {k: PlacementProblem.make("bert", p, "simulated") for k, p in files.items()}


def test_a_renamed_copy_of_a_builtin_platform_scores_against_its_optimum(problems) -> None:
    ref = reference_optimum("bert", 1, "cpu-igpu")
    renamed = problems["renamed"]
    assert renamed.platform.name == "my-igpu"
    assert renamed.task_sha256 == problems["builtin"].task_sha256 == ref.task_sha256
    assert renamed.reference == ref
    assert renamed.score(ref.latency) == pytest.approx(1.0)


def test_a_builtin_name_with_other_figures_has_no_reference_and_no_score(problems) -> None:
    ref = reference_optimum("bert", 1, "cpu-igpu")
    other = problems["same name, other figures"]
    assert other.platform.name == "cpu-igpu" and other.task_sha256 != ref.task_sha256
    assert other.reference is None
    assert math.isnan(other.score(ref.latency))  # was 52.26 where 1.0 is the optimum


def _row(problem: PlacementProblem, latency: float, task: str | None) -> ResultRow:
    return ResultRow(
        model="bert", graph_version=1, platform=problem.platform.name, backend="simulated", coarsening="fused",
        groups=problem.num_groups, method="heft", seed=0, budget=None, latency=latency, cpu_only_latency=1.0,
        speedup_vs_cpu=1.0, evaluations=1, wall_time=0.0, placement=[0] * problem.num_groups, task_sha256=task,
    )  # fmt: skip


def test_report_scores_by_the_hash_a_row_records(problems) -> None:
    ref = reference_optimum("bert", 1, "cpu-igpu")
    other, renamed = problems["same name, other figures"], problems["renamed"]
    rows = [
        _row(other, ref.latency / 50, other.task_sha256),  # a custom platform's fast latency, same name
        _row(problems["builtin"], ref.latency, problems["builtin"].task_sha256),
        _row(renamed, ref.latency, renamed.task_sha256),
    ]
    scores = sorted((s["platform"], s["score"]) for s in summarise(rows))
    assert scores[0][0] == "cpu-igpu" and scores[2][0] == "my-igpu"
    by_task = {s["reference"] is None: s["score"] for s in summarise(rows)}
    assert math.isnan(by_task[True])  # summarised apart from the built-in task's row, not scored
    assert by_task[False] == pytest.approx(1.0)
    assert scores[2][1] == pytest.approx(1.0)


def test_only_figures_change_the_hash() -> None:
    plat = load_platform("cpu-igpu")
    base = task_sha256("bert", 1, "fused", 206, plat)
    same = dataclasses.replace(plat, name="x", description="y", sources=())
    assert task_sha256("bert", 1, "fused", 206, same) == base
    renamed_devices = tuple(dataclasses.replace(d, name=f"dev{i}") for i, d in enumerate(plat.devices))
    assert task_sha256("bert", 1, "fused", 206, dataclasses.replace(plat, devices=renamed_devices)) == base
    changed = [
        task_sha256("bert", 2, "fused", 206, plat),
        task_sha256("bert", 1, "ops", 206, plat),
        task_sha256("bert", 1, "fused", 205, plat),
        task_sha256("resnet50", 1, "fused", 206, plat),
        task_sha256("bert", 1, "fused", 206, plat, model_sha256="ab" * 32),
        task_sha256("bert", 1, "fused", 206, dataclasses.replace(plat, host=1)),
        task_sha256(
            "bert", 1, "fused", 206, dataclasses.replace(plat, links={**plat.links, (0, 1): Link(1e-6, 1e9)})
        ),
    ]
    for field, value in (
        ("launch_overhead", 3e-6),
        ("memory_bytes", 2**30),
        ("op_efficiency", {"default": 0.5}),
    ):
        devices = (dataclasses.replace(plat.devices[0], **{field: value}), *plat.devices[1:])
        changed.append(task_sha256("bert", 1, "fused", 206, dataclasses.replace(plat, devices=devices)))
    assert base not in changed and len(set(changed)) == len(changed)


def test_an_unknown_hash_has_no_reference_and_an_old_row_keeps_name_matching() -> None:
    assert reference_for("bert", 1, "cpu-igpu", "fused", 206, task_sha256="0" * 64) is None
    ref = reference_optimum("bert", 1, "cpu-igpu")
    assert (
        reference_for("bert", 1, "cpu-igpu", "fused", len(ref.placement)) == ref
    )  # a row from before hashes
    assert reference_for("bert", 1, "cpu-igpu", "fused", len(ref.placement) + 1) is None
