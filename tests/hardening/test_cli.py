"""The CLI (issue #12, 11; issue #9 section 5): one-line user errors with exit status 2, help texts,
``--no-progress``, TensorBoard logs and checkpoints, one CPU-only reference."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from experiments import cli

SIM = {"model": "tiny_cnn", "platform": "cpu-dgpu", "backend": "simulated"}


def _train(tmp_path: Path, *extra: str, agent: str = "heft", env_kwargs: dict = SIM) -> int:
    argv = ["train", "--agent", agent, "--env", "DevicePlacement-v0", "--env-kwargs", json.dumps(env_kwargs)]
    return cli.main([*argv, "--out", str(tmp_path / "run"), *extra])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--agent", "heft", "--env", "DevicePlacementSim-bret-v0"], "DevicePlacementSim-bert"),
        (["show", "missing.json"], "missing.json does not exist"),
        (["graphs", "--models", "bret"], "unknown model 'bret'"),
        (
            ["bench", "--models", "tiny_cnn", "--methods", "hef", "--platform", "cpu-dgpu"],
            "unknown method 'hef'",
        ),
    ],
)
def test_a_user_error_is_one_line_and_status_2(tmp_path, monkeypatch, capsys, argv, message) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("placement-gym: error: ") and message in err
    assert "\n" not in err and "Traceback" not in err


def test_bad_env_kwargs_and_a_dynamic_model_are_user_errors(tmp_path, capsys) -> None:
    assert _train(tmp_path, env_kwargs={**SIM, "bogus": 1}) == 2
    assert "unexpected keyword argument 'bogus'" in capsys.readouterr().err
    assert _train(tmp_path, env_kwargs={**SIM, "platform": "../../x"}) == 2
    assert "unknown platform '../../x'" in capsys.readouterr().err

    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([-1, 3, -1, -1], ov.Type.f32, name="x")
    w = ops.constant(np.ones((4, 3, 3, 3), np.float32))
    model = ov.Model([ops.relu(ops.convolution(x, w, [1, 1], [0, 0], [0, 0], [1, 1]))], [x], "dyn")
    ov.save_model(model, tmp_path / "dyn.xml")
    dynamic = {**SIM, "model": str(tmp_path / "dyn.xml")}
    assert _train(tmp_path, env_kwargs=dynamic) == 2
    err = capsys.readouterr().err
    assert "dynamic input shapes" in err and "--input-shape x=" in err and "Traceback" not in err
    assert _train(tmp_path, "--input-shape", "x=1,3,16,16", "--no-progress", env_kwargs=dynamic) == 0
    best = json.loads((tmp_path / "run" / "best_placement.json").read_text())
    assert best["model_path"] == str((tmp_path / "dyn.xml").resolve()) and best["input_shapes"] == {
        "x": [1, 3, 16, 16]
    }
    assert (
        cli.main(["show", str(tmp_path / "run" / "best_placement.json"), "--png", str(tmp_path / "p.png")])
        == 0
    )


def test_debug_shows_the_traceback(tmp_path) -> None:
    from placement_gym.errors import UnknownNameError

    with pytest.raises(UnknownNameError):
        cli.main(["--debug", "graphs", "--models", "bret"])
    with pytest.raises(UnknownNameError):
        cli.main(["graphs", "--models", "bret", "--debug"])


def test_help_lists_methods_and_every_flag_has_help(capsys) -> None:
    from agents import METHODS

    assert cli.main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in METHODS)
    commands = [([name], sub) for name, sub in _subcommands(cli.build_parser())]
    while commands:  # every subcommand, nested ones (transfer pretrain) included
        name, sub = commands.pop()
        for action in sub._actions:
            assert action.help, f"{' '.join(name)} {action.option_strings or action.dest} has no help text"
        commands += [([*name, n], s) for n, s in _subcommands(sub)]


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [item for a in actions for item in a.choices.items()]


def test_one_shot_methods_have_no_misleading_budget(tmp_path, capfd) -> None:
    assert _train(tmp_path) == 0  # no --budget: heft evaluates what it needs
    err = capfd.readouterr().err
    assert "1/500" not in err and "/500" not in err
    best = json.loads((tmp_path / "run" / "best_placement.json").read_text())
    assert best["evaluations"] == 1


def test_no_progress_shows_no_bar(tmp_path, capfd) -> None:
    assert _train(tmp_path, "--no-progress", "--budget", "5", agent="random_search") == 0
    assert "eval/s" not in capfd.readouterr().err
    assert _train(tmp_path, "--budget", "5", "--overwrite", agent="random_search") == 0
    assert "5/5" in capfd.readouterr().err  # the bar is there when asked for


def test_sb3_learner_writes_tensorboard_logs_and_safe_checkpoints(tmp_path) -> None:
    from agents.sb3.methods import PPOGNN
    from placement_gym.envs import DevicePlacementEnv

    kwargs = '{"gnn": "gcn", "hidden": 8, "layers": 1}'
    argv = ["--budget", "40", "--checkpoint-every", "16", "--no-progress", "--agent-kwargs", kwargs]
    assert _train(tmp_path, *argv, agent="ppo_gnn") == 0
    run = tmp_path / "run"
    assert list((run / "tb").glob("PPO_*/events.out.tfevents.*")), "SB3's own training scalars"
    assert list((run / "tb").glob("events.out.tfevents.*")), "the per-evaluation scalars"
    folders = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert folders == ["eval-000016", "eval-000032", "final"]
    loaded = PPOGNN()
    loaded.load(run / "checkpoints" / "final")
    env = DevicePlacementEnv(**SIM)
    assert loaded.predict_placement(env).shape == (env.num_groups,)
    assert not list(run.glob("*.zip")), "no pickled SB3 zip is written"


def test_a_published_system_saves_its_final_policy(tmp_path) -> None:
    import torch

    assert _train(tmp_path, "--budget", "8", "--no-progress", agent="hsdag") == 0
    state = torch.load(tmp_path / "run" / "checkpoints" / "final_policy.pt", weights_only=True)
    assert state and all(isinstance(v, torch.Tensor) for v in state.values())


def test_bench_baselines_uses_the_same_cpu_only_reference_as_bench(tmp_path) -> None:
    from experiments.grid import cpu_device
    from experiments.studies.bench_baselines import baseline_rows
    from placement_gym.envs import DevicePlacementEnv
    from placement_gym.platforms import load_platform

    data = yaml.safe_load(Path(load_platform.__code__.co_filename).with_name("cpu-dgpu.yaml").read_text())
    data["devices"] = data["devices"][::-1]  # the GPU first: device 0 is not the CPU
    path = tmp_path / "gpu-first.yaml"
    path.write_text(yaml.safe_dump(data))
    env = DevicePlacementEnv("tiny_cnn", path, "simulated")
    assert cpu_device(env.problem.platform) == 1
    (row,) = baseline_rows(env, "tiny_cnn", ["single_device"], 10.0)
    cpu = env.problem.evaluate(np.ones(env.num_groups, np.int64)).latency
    assert row["cpu_only_ms"] == pytest.approx(cpu * 1e3)
