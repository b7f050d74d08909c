"""Protocol transfer-v1: its tasks, the pretraining rules, and that no shipped policy has seen a held-out family."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import placement_gym
from placement_gym import protocol, transfer
from placement_gym.errors import ConfigError
from placement_gym.tasks import reference_optima

ROOT = Path(__file__).resolve().parents[1]
#: Every shipped policy's metadata: what it was trained on.
SHIPPED_META = sorted(
    [*ROOT.glob("agents/learned/pretrained*/meta.json"), *ROOT.glob("agents/sb3/pretrained*/*/meta.json")]
)


def _trained_on(meta: dict) -> set[str]:
    training = meta.get("training", meta)
    models = set(training.get("models", ())) | set(training.get("args", {}).get("models", ()))
    models |= {t.split("/")[0] for t in meta.get("tasks", ())}
    return models


def test_every_shipped_policy_records_its_training_models() -> None:
    assert len(SHIPPED_META) >= 10, SHIPPED_META
    for path in SHIPPED_META:
        assert _trained_on(json.loads(path.read_text())), f"{path} names no training models"


@pytest.mark.parametrize("path", SHIPPED_META, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_shipped_policy_was_trained_on_a_held_out_family(path: Path) -> None:
    meta = json.loads(path.read_text())
    seen = _trained_on(meta) & set(placement_gym.HELD_OUT_MODELS)
    assert not seen, f"{path} was trained on held-out families {sorted(seen)}"
    text = json.dumps(meta)
    for family in ("swin_t", "mobilevit_s", "whisper_tiny"):  # not even named in a command or argument
        assert family not in text, f"{path} mentions {family}"


def test_transfer_tasks_are_every_held_out_family_and_v1_keeps_its_split() -> None:
    every = {(m, p) for m in placement_gym.HELD_OUT_MODELS for p in placement_gym.HELD_OUT_PLATFORMS}
    assert {(t.model, t.platform) for t in transfer.TRANSFER_TASKS} == every - set(transfer.EXCLUDED)
    assert len(transfer.TRANSFER_TASKS) == 9
    assert {t.model for t in protocol.HELD_OUT_TASKS} == {"vit_b16", "convnext_t"}  # v1's rows keep meaning
    assert transfer.VERSION != protocol.VERSION and transfer.BUDGET == 100 and transfer.TRANSFER_SEEDS == (0, 1, 2, 3, 4)
    assert transfer.protocol_tasks(transfer.VERSION) == transfer.TRANSFER_TASKS
    v1_tasks = protocol.TRAIN_TASKS + protocol.HELD_OUT_TASKS + protocol.MASKED_TASKS  # every v1 split
    assert set(transfer.protocol_tasks(protocol.VERSION)) == set(v1_tasks)


def test_every_transfer_task_has_a_stored_optimum_or_bound() -> None:
    stored = reference_optima()
    for task in transfer.TRANSFER_TASKS:
        ref = stored.get(f"{task.model}/v1/{task.platform}/fused")
        assert ref is not None, f"{task.name} has no stored optimum"
        assert ref.lower_bound <= ref.latency <= ref.heft_latency and ref.headroom > 1


def test_new_held_out_families_are_refused_for_training() -> None:
    for family in ("swin_t", "mobilevit_s", "whisper_tiny"):
        with pytest.raises(ConfigError, match=f"{family} is a held-out model family"):
            protocol.check_trainable([family])


def test_pretraining_rules() -> None:
    ok = transfer.Pretraining(env_steps=10, evaluations=10, cpu_s=5.0, wall_s=6.0, models=("bert", "gpt2"))
    transfer.check_pretraining(ok)
    with pytest.raises(ConfigError, match="held-out famil"):
        transfer.check_pretraining(transfer.Pretraining(1, 1, 1.0, 1.0, models=("swin_t",)))
    with pytest.raises(ConfigError, match="CPU-seconds"):
        transfer.check_pretraining(transfer.Pretraining(1, 1, 1e5, 1.0, models=("bert",)))
    with pytest.raises(ConfigError, match="not a train or pretraining-only model"):
        transfer.check_pretraining(transfer.Pretraining(1, 1, 1.0, 1.0, models=("my_model",)))
    # only the wall time of a single-threaded run recorded: it bounds the CPU time
    assert transfer.Pretraining(1, 1, None, 37.3).cpu_bound == 37.3


def test_shipped_learners_pretraining_records_are_within_the_rules() -> None:
    from experiments.cli.transfer import SHIPPED_PRETRAINING, pretraining_of

    for name in SHIPPED_PRETRAINING:
        record = pretraining_of(name)
        assert record.models and record.cpu_bound <= transfer.PRETRAIN_CPU_SECONDS
    assert pretraining_of("heft") == transfer.NO_PRETRAINING
    with pytest.raises(ConfigError, match="--pretraining"):
        pretraining_of("my_agent:MyAgent")
