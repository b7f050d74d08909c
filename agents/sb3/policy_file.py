"""The one reader of a saved policy folder (``meta.json`` + ``weights.pt``), of both kinds the project writes:
an SB3 learner's (``SB3Method.save``, :class:`PolicyMeta`) and a pretrained device-free policy's
(:func:`write_transfer_policy`, :class:`TransferMeta`; :mod:`agents.sb3.pretrained_ppo`). ``meta.json``'s
``method`` says which: ``"pretrained_ppo"`` and ``"guided_ppo"`` are transfer policies, anything else an
SB3 learner's.

Everything in the folder is checked before any of it reaches Stable-Baselines3 or torch builds a model:

* ``meta.json`` (at most 64 KiB, :mod:`placement_gym.files`) goes through :class:`PolicyMeta`, which allows
  only the fields ``save`` writes. The method must be registered (:data:`agents.METHODS`) and be an SB3
  learner; its ``algorithm`` must be that method's. Its keyword arguments may only be ones that rebuild a
  policy: the method's own constructor parameters (read from the class, so a method or policy added to the
  package is accepted without a list here), ``policy_kwargs`` with the policy class's parameters, and the
  algorithm's hyperparameters, except those that write files, choose a device or processes, or carry
  classes (``tensorboard_log``, ``device``, ``n_envs``, ``rollout_buffer_class``...). A file that asks for
  TensorBoard logs in a folder of its choosing is refused, not obeyed. Every number must be finite and
  within bounds: widths at most :data:`MAX_WIDTH`, step counts at most :data:`MAX_STEPS`, and the rollout
  buffer they imply at most :data:`MAX_BUFFER_FLOATS` floats (one file asked for a 4 TB allocation).
  Space shapes are bounded too (at most :data:`MAX_OBSERVATION_FLOATS` floats per observation, at most
  ``MAX_DEVICES`` devices per group). A transfer policy's ``meta.json`` holds its architecture (``arch``:
  widths and layers within the same bounds, at most :data:`MAX_WEIGHT_ELEMENTS` parameters), its PPO
  hyperparameters (``ppo``: only MaskablePPO's, within :data:`FLOAT_BOUNDS`) and the record of its
  pretraining (``training``: counts, times, names and its command, each bounded).
* ``weights.pt`` (a regular file, not a link, at most :data:`MAX_WEIGHTS_BYTES`) is read with
  ``torch.load(weights_only=True)`` (no code runs) and must hold only tensors, at most
  :data:`MAX_WEIGHT_ELEMENTS` in all. Policy weights must be finite: NaN or inf weights (which loaded
  silently and placed every group on device 0) are refused.
  The observation bounds (SB3 policies) must match the recorded spaces' shapes and hold no NaN.

Every refusal is a :class:`~placement_gym.errors.PlacementGymError` naming the folder and the field. The
schemas and bounds are in :mod:`agents.sb3.policy_schema`.
"""

from __future__ import annotations

import json
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from agents.sb3.policy_schema import (
    DENIED,
    MAX_META_BYTES,
    MAX_WEIGHT_ELEMENTS,
    MAX_WEIGHTS_BYTES,
    POLICY_FORMAT,
    TRANSFER_METHOD,
    TRANSFER_METHODS,
    PolicyMeta,
    TransferMeta,
)
from placement_gym.errors import ConfigError, PlacementGymError, UnknownNameError, quote
from placement_gym.files import load_refusal, parse_json, read_text


def _meta_json(folder: Path) -> dict[str, Any]:
    """The parsed ``meta.json`` of ``folder``: a small JSON object in a regular file (not a link)."""
    path = folder / "meta.json"
    if path.is_symlink():
        raise PlacementGymError(
            f"{path} is a symbolic link, not a regular file (a saved policy's files may not be links)"
        )
    try:
        data = parse_json(read_text(path, "policy file", MAX_META_BYTES), f"policy file {path}")
    except ConfigError as exc:
        raise PlacementGymError(f"{folder} is not a readable saved policy: {exc}") from None
    if not isinstance(data, dict):
        raise PlacementGymError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _validate(schema: type[BaseModel], data: dict[str, Any], path: Path) -> Any:
    """``data`` checked by ``schema``; its first problems (field and reason) in one line otherwise."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p)[:64] for p in err["loc"]) or "meta.json"
            if err["type"] == "extra_forbidden":
                last = str(err["loc"][-1]) if err["loc"] else ""
                why = "may not be set by a policy file" if last in DENIED else "not a field of a saved policy"
                problems.append(f"{where}: {why}")
            else:
                problems.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
        raise PlacementGymError(f"{path} is not a valid saved policy: " + "; ".join(problems)) from None
    except UnknownNameError as exc:
        raise PlacementGymError(f"{path}: {exc}") from None


def read_meta(folder: str | os.PathLike) -> PolicyMeta | TransferMeta:
    """The checked ``meta.json`` of a saved policy folder: a :class:`TransferMeta` when its ``method`` is
    :data:`TRANSFER_METHOD`, else a :class:`PolicyMeta`.

    Raises:
        PlacementGymError: If it is missing, a link, too large, not JSON, or breaks its schema.
    """
    folder = Path(folder)
    data = _meta_json(folder)
    schema = TransferMeta if data.get("method") in TRANSFER_METHODS else PolicyMeta
    return _validate(schema, data, folder / "meta.json")


@dataclass(frozen=True)
class PolicyFile:
    """A checked saved policy: its metadata, the policy's ``state_dict`` and the observation bounds."""

    meta: PolicyMeta
    policy_state: dict[str, Any]
    bounds: dict[str, Any]


@dataclass(frozen=True)
class TransferPolicyFile:
    """A checked transfer policy: its metadata and the policy's ``state_dict``."""

    meta: TransferMeta
    policy_state: dict[str, Any]


def _read_weights(folder: Path, parts: tuple[str, ...], device: str) -> dict[str, dict[str, Any]]:
    """``weights.pt`` of ``folder``: exactly ``parts``, each a mapping of names to tensors, bounded in size,
    finite in ``"policy"`` and without NaN elsewhere."""
    import torch

    path = folder / "weights.pt"
    try:
        st = path.lstat()
    except OSError as exc:
        raise PlacementGymError(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise PlacementGymError(
            f"{path} is a symbolic link, not a regular file (a saved policy's files may not be links)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise PlacementGymError(f"{path} is not a regular file")
    if st.st_size > MAX_WEIGHTS_BYTES:
        raise PlacementGymError(
            f"{path} has {st.st_size} bytes; a saved policy's weights may have {MAX_WEIGHTS_BYTES}"
        )
    try:
        with warnings.catch_warnings():  # torch's own warnings would print before our one line
            warnings.simplefilter("ignore")
            weights = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # unpickling refused, a damaged archive: a bad folder either way
        raise PlacementGymError(
            f"{folder} is not a readable saved policy: weights.pt: {load_refusal(exc)}"
        ) from exc
    if not isinstance(weights, dict) or set(weights) != set(parts):
        raise PlacementGymError(f"{path} must hold exactly {' and '.join(repr(p) for p in parts)}")
    total = 0
    for part in parts:
        tensors = weights[part]
        if not isinstance(tensors, dict) or not all(
            isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in tensors.items()
        ):
            raise PlacementGymError(f"{path}: {part!r} must map names to tensors")
        for name, tensor in tensors.items():
            total += tensor.numel()
            if total > MAX_WEIGHT_ELEMENTS:
                raise PlacementGymError(f"{path} holds more than {MAX_WEIGHT_ELEMENTS} numbers")
            if tensor.is_floating_point() or tensor.is_complex():
                bad = ~torch.isfinite(tensor) if part == "policy" else torch.isnan(tensor)
                if bool(bad.any()):
                    kind = "NaN or infinite" if part == "policy" else "NaN"
                    raise PlacementGymError(
                        f"{path}: {part} tensor {name[:64]!r} has {int(bad.sum())} {kind} values of "
                        f"{tensor.numel()}; the policy is damaged (retrain or restore it)"
                    )
    return weights


def read_policy(folder: str | os.PathLike, device: str = "cpu") -> PolicyFile:
    """Read and check an SB3 learner's saved policy folder (see the module docstring).

    Raises:
        PlacementGymError: For anything :func:`read_meta` refuses, a transfer policy's folder, a missing,
            linked, oversized or unreadable ``weights.pt``, content other than tensors, too many numbers,
            non-finite policy weights, or observation bounds that do not fit the recorded spaces.
    """
    folder = Path(folder)
    meta = read_meta(folder)
    if isinstance(meta, TransferMeta):
        raise PlacementGymError(
            f"{folder} holds a {meta.method} policy, not an SB3 learner's; use {meta.method}:policy={folder}"
        )
    weights = _read_weights(folder, ("policy", "bounds"), device)
    bounds = weights["bounds"]
    expected = {
        f"{k}.{end}": tuple(s.shape) for k, s in meta.observation_space.items() for end in ("low", "high")
    }
    found = {k: tuple(t.shape) for k, t in bounds.items()}
    if found != expected:
        raise PlacementGymError(
            f"{folder / 'weights.pt'}: the observation bounds do not fit meta.json's observation_space"
        )
    return PolicyFile(meta, weights["policy"], bounds)


def read_transfer_policy(
    folder: str | os.PathLike, device: str = "cpu", method: str = TRANSFER_METHOD
) -> TransferPolicyFile:
    """Read and check a transfer policy's folder (written by :func:`write_transfer_policy`) of ``method``
    (one of :data:`~agents.sb3.policy_schema.TRANSFER_METHODS`).

    Raises:
        PlacementGymError: For a folder of another method, anything :func:`read_meta` refuses, and the
            checks of ``weights.pt`` of :func:`read_policy` (a ``"policy"`` mapping only, no bounds).
    """
    folder = Path(folder)
    data = _meta_json(folder)
    if data.get("method") != method:
        raise PlacementGymError(f"{folder} holds a {quote(data.get('method'))} policy, not a {method} one")
    meta = _validate(TransferMeta, data, folder / "meta.json")
    return TransferPolicyFile(meta, _read_weights(folder, ("policy",), device)["policy"])


def write_transfer_policy(
    folder: str | os.PathLike,
    state: dict[str, Any],
    arch: dict[str, Any],
    ppo: dict[str, Any],
    training: dict[str, Any],
    method: str = TRANSFER_METHOD,
) -> Path:
    """Write a transfer policy: ``weights.pt`` (``{"policy": state_dict}``, tensors only) and ``meta.json``
    (format, ``method``, ``arch``, ``ppo`` and the ``training`` record), checked by :class:`TransferMeta`
    first, so nothing is written that :func:`read_transfer_policy` would refuse.

    Returns:
        The folder.

    Raises:
        PlacementGymError: If the metadata breaks :class:`TransferMeta`.
    """
    import torch

    folder = Path(folder)
    meta = {
        "format": POLICY_FORMAT,
        "method": method,
        "arch": arch,
        "ppo": ppo,
        "training": training,
    }
    _validate(TransferMeta, json.loads(json.dumps(meta)), folder / "meta.json")
    text = json.dumps(meta, indent=1, allow_nan=False)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"policy": {k: v.detach().cpu() for k, v in state.items()}}, folder / "weights.pt")
    (folder / "meta.json").write_text(text + "\n")
    return folder


def shipped_policy_names(shipped: Path) -> list[str]:
    """Names of the policy folders (those with a ``meta.json``) in the folder ``shipped``."""
    return sorted(p.name for p in shipped.glob("*") if (p / "meta.json").is_file())


def policy_folder(policy: str, shipped: Path, what: str) -> Path:
    """The folder of ``policy``: a name shipped in ``shipped``, else a path to a policy folder.

    Raises:
        UnknownNameError: For a name that is neither (the message names ``what`` and lists the shipped ones).
    """
    if (shipped / policy / "meta.json").is_file():
        return shipped / policy
    if Path(policy, "meta.json").is_file():
        return Path(policy)
    raise UnknownNameError(what, policy, shipped_policy_names(shipped))


__all__ = [
    "POLICY_FORMAT",
    "TRANSFER_METHOD",
    "TRANSFER_METHODS",
    "PolicyFile",
    "PolicyMeta",
    "TransferMeta",
    "TransferPolicyFile",
    "read_meta",
    "read_policy",
    "policy_folder",
    "read_transfer_policy",
    "shipped_policy_names",
    "write_transfer_policy",
]
