"""Third-party warnings and advice kept out of the one-line errors, and messages that name the real
problem (an unknown dataset task as a task, memory in a unit that shows it, a negative count refused,
weights with a tensor the policy does not have)."""

from __future__ import annotations

import collections
import shutil
import warnings

import pytest

from experiments.cli import main
from placement_gym.errors import CorruptModelError, PlacementGymError


# ---------------------------------------------------------------------- third-party warnings and advice
def test_a_pickled_policy_is_refused_in_one_line_without_torchs_advice(tmp_path, capsys):
    import torch

    from agents.sb3.guided_ppo import METHOD, resolve_policy
    from agents.sb3.policy_file import read_transfer_policy

    folder = tmp_path / "policy"
    shutil.copytree(resolve_policy("all", "bert"), folder)
    torch.save({"policy": collections.OrderedDict(a=torch.zeros(2)), "x": print}, folder / "weights.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning torch printed would fail here
        with pytest.raises(PlacementGymError) as caught:
            read_transfer_policy(folder, method=METHOD)
    message = str(caught.value)
    assert "pickled Python objects, which are never loaded" in message
    assert "weights_only" not in message and "trust" not in message and "\x1b" not in message
    assert main(["bench", "--models", "tiny_cnn", "--methods", f"guided_ppo:policy={folder}", "--seeds", "0",
                 "--budget", "10", "--out", str(tmp_path / "out"), "--no-progress"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "weights_only" not in err and "Warning" not in err


@pytest.mark.parametrize("content", [b"garbage", b"\x80\x04\x95 not really a pickle"])
def test_a_garbage_graph_file_is_not_advised_to_be_loaded_unsafely(tmp_path, content):
    from placement_gym.graph import CompGraph

    path = tmp_path / "graph.npz"
    path.write_bytes(content)
    with pytest.raises(CorruptModelError, match="not an .npz archive") as caught:
        CompGraph.load(path)
    assert "unsafe" not in str(caught.value) and "allow_pickle" not in str(caught.value)


def test_load_refusal_names_the_problem_in_a_few_words():
    import pickle
    import zipfile

    from placement_gym.files import load_refusal

    advice = pickle.UnpicklingError("Weights only load failed. \x1b[1mdo those steps only if you trust\x1b[0m weights_only=False")
    assert load_refusal(advice).startswith("it holds pickled Python objects")
    assert load_refusal(zipfile.BadZipFile("File is not a zip file")).startswith("it is not a valid archive")
    assert load_refusal(ValueError("first sentence. second sentence")) == "first sentence"


# ---------------------------------------------------------------------- messages that name the real problem
def test_an_unknown_dataset_task_is_answered_with_tasks(capsys, tmp_path):
    assert main(["datasets", "--tasks", "tiny_cnn/cpu-dgpu", "--path", str(tmp_path / "minari")]) == 2
    err = capsys.readouterr().err
    assert "unknown dataset task (model/platform) 'tiny_cnn/cpu-dgpu'" in err and "bert/cpu-igpu" in err
    assert "DevicePlacement" not in err  # no env IDs


def test_a_negative_path_points_is_refused(capsys):
    assert main(["datasets", "--path-points", "-5"]) == 2
    assert "--path-points: must be >= 0, got -5" in capsys.readouterr().err


def test_an_out_of_memory_placement_shows_figures_that_differ():
    from placement_gym.simulation.backend import memory_over

    assert memory_over(36_700, 5_200) == "peak 35.8 KiB > capacity 5.1 KiB"
    assert memory_over(3 * 2**30, 2**30) == "peak 3.0 GiB > capacity 1.0 GiB"
    assert memory_over(1_000_010, 1_000_000) == "peak 1,000,010 B > capacity 1,000,000 B"  # equal when rounded
    assert memory_over(700, 512) == "peak 700 B > capacity 512 B"


def test_place_on_model_parallel_names_real_sizes(capsys):
    assert main(["place", "--model", "tiny_cnn", "--platform", "model-parallel"]) == 2
    err = capsys.readouterr().err
    assert "0.0 MiB" not in err and "KiB > capacity" in err


def test_guided_ppo_refuses_weights_with_an_unknown_tensor():
    import torch

    from agents.sb3.guided_ppo import METHOD, resolve_policy
    from agents.sb3.guided_policy import PolicyRanker, refuse_unknown_tensors
    from agents.sb3.policy_file import read_transfer_policy
    from placement_gym.problem import PlacementProblem

    saved = read_transfer_policy(resolve_policy("all", "bert"), method=METHOD)
    refuse_unknown_tensors(saved.policy_state)  # the shipped policy's parts are all known
    state = {**saved.policy_state, "extra_head.weight": torch.zeros(3)}
    arch = saved.meta.arch
    problem = PlacementProblem.make("tiny_cnn", "cpu-dgpu", "simulated")
    try:
        with pytest.raises(PlacementGymError, match=r"1 tensor\(s\) it does not have \('extra_head.weight'\)"):
            PolicyRanker.from_state(problem, state, arch.extractor.hidden, arch.extractor.layers, list(arch.head))
    finally:
        problem.close()
