"""User files: one bounded reader (size, YAML alias expansion, nesting), bounded quotes in schema errors, and
physical bounds on every platform figure, for files and for platforms built in code."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import yaml

from placement_gym.errors import ConfigError, quote
from placement_gym.files import MAX_FILE_BYTES, load_json, parse_yaml, read_text
from placement_gym.platforms import Link, Platform, load_platform, platform_from_dict
from placement_gym.platforms.bounds import MAX_DEVICES

BUILTIN = Path(__file__).parents[2] / "placement_gym" / "platforms" / "cpu-igpu.yaml"


def _spec() -> dict:
    return yaml.safe_load(BUILTIN.read_text())


def _bomb(levels: int = 9, width: int = 9) -> str:
    """A "billion laughs" document of about 1.3 KB: ``width ** levels`` strings once expanded."""
    lines = ["l0: &l0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_a_platform_description_is_refused_before_it_is_built(tmp_path: Path) -> None:
    text = yaml.safe_dump(_spec(), sort_keys=False).replace("description:", "description_was:", 1)
    bomb = _bomb()
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb + text.replace("description_was:", "description: *l8\nold_description:", 1))
    assert path.stat().st_size < 4000
    start = time.process_time()
    with pytest.raises(ConfigError, match="aliases expand to more than") as err:
        load_platform(path)
    assert time.process_time() - start < 5  # it was 46 s and 7.3 GB before
    assert len(str(err.value)) < 500


def test_shared_aliases_within_the_bound_still_load() -> None:
    assert parse_yaml("a: &x {b: [1, 2]}\nc: *x\n") == {"a": {"b": [1, 2]}, "c": {"b": [1, 2]}}


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: &x [1, *x]\n", "contains it"),
        ("[" * 3000 + "]" * 3000, "nests deeper"),
        ("a: [unclosed", "not valid YAML"),
        ("--- 1\n--- 2\n", "not valid YAML"),
        ("!!python/object:os.system {}", "not valid YAML"),
    ],
)
def test_bad_yaml_is_one_config_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_yaml(text, "test file")


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("description: " + "x" * MAX_FILE_BYTES + "\n")
    with pytest.raises(ConfigError, match=f"larger than the {MAX_FILE_BYTES} bytes"):
        load_platform(path)


@pytest.mark.parametrize("make", ["folder", "fifo"])
def test_a_path_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path, make: str) -> None:
    import os

    path = tmp_path / "x.yaml"
    path.mkdir() if make == "folder" else os.mkfifo(path)
    with pytest.raises(ConfigError, match="not a regular file|cannot read|folder"):
        read_text(path, "platform file")


def test_json_refuses_nan_and_bad_text(tmp_path: Path) -> None:
    path = tmp_path / "meta.json"
    path.write_text('{"a": NaN}')
    with pytest.raises(ConfigError, match="NaN"):
        load_json(path)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_json(path)


@pytest.mark.parametrize(
    "field, value",
    [("kind", "x" * 200_000), ("description", ["y" * 1000] * 1000), ("ov_device", {"k": "v" * 10**5})],
)
def test_a_schema_error_quotes_a_bounded_prefix_of_the_bad_value(field: str, value: object) -> None:
    spec = _spec()
    if field == "description":
        spec[field] = value
    else:
        spec["devices"][0][field] = value
    with pytest.raises(ConfigError, match=field) as err:
        platform_from_dict(spec)
    assert len(str(err.value)) < 1000


def test_an_unknown_key_of_any_length_is_named_briefly() -> None:
    spec = _spec()
    spec["k" * 100_000] = 1
    with pytest.raises(ConfigError, match="unknown field") as err:
        platform_from_dict(spec)
    assert len(str(err.value)) < 1000


def test_quote_is_bounded_for_any_value() -> None:
    nested: list = ["x" * 1000]
    for _ in range(30):
        nested = [nested] * 10  # 10**30 strings if expanded
    for value in (nested, "z" * 10**6, b"b" * 10**6, {i: i for i in range(10**5)}):
        assert len(quote(value)) <= 160
    assert "1000000 characters" in quote("z" * 10**6)
    assert quote("gpu") == "'gpu'"


# ----------------------------------------------------------------- physical bounds of platform figures
def test_a_self_link_is_refused_in_a_file_and_in_code() -> None:
    spec = _spec()
    cpu = spec["devices"][0]["name"]
    spec["links"] = [*spec.get("links", []), {"src": cpu, "dst": cpu, "latency": 1e-6, "bandwidth": 1e9}]
    with pytest.raises(ConfigError, match="to itself"):
        platform_from_dict(spec)
    plat = load_platform("cpu-igpu")
    links = {**plat.links, (0, 0): Link(1e-6, 1e9)}
    with pytest.raises(ConfigError, match="to itself"):
        dataclasses.replace(plat, links=links)


@pytest.mark.parametrize(
    "where, field, value",
    [
        ("link", "bandwidth", 1e-320),
        ("link", "bandwidth", 1e30),
        ("link", "latency", 1e9),
        ("link", "blocked_bandwidth", 5e-324),
        ("device", "mem_bandwidth", 1e-300),
        ("device", "memory_bytes", 1e40),
        ("device", "launch_overhead", 1e6),
        ("device", "peak_flops", {"f32": 1e-10}),
    ],
)
def test_a_figure_outside_its_physical_range_is_refused_with_its_unit(where, field, value) -> None:
    spec = _spec()
    if where == "link":
        spec["default_link"] = {"latency": 1e-6, "bandwidth": 1e9, field: value}
    else:
        spec["devices"][0][field] = value
    with pytest.raises(ConfigError, match=rf"{field}.*outside \[.*\] (bytes|s|FLOP)"):
        platform_from_dict(spec)


def test_code_built_devices_and_links_meet_the_same_bounds() -> None:
    with pytest.raises(ConfigError, match="bandwidth"):
        Link(latency=0.0, bandwidth=1e-320)
    device = load_platform("cpu-igpu").devices[0]
    with pytest.raises(ConfigError, match="mem_bandwidth"):
        dataclasses.replace(device, mem_bandwidth=float("1e-310"))
    with pytest.raises(ConfigError, match="peak_flops"):
        dataclasses.replace(device, peak_flops={device.precision: 1e300})


def test_an_absurd_device_count_is_refused_with_the_figure() -> None:
    spec = _spec()
    base = spec["devices"][0]
    spec["devices"] = [{**base, "name": f"d{i}"} for i in range(10_000)]
    spec["links"], spec["host"] = [], None
    spec["default_link"] = {"latency": 1e-6, "bandwidth": 1e9}
    with pytest.raises(ConfigError, match=f"at most {MAX_DEVICES}"):
        platform_from_dict(spec)
    device = load_platform("cpu-igpu").devices[0]
    many = tuple(dataclasses.replace(device, name=f"d{i}") for i in range(MAX_DEVICES + 1))
    with pytest.raises(ConfigError, match=f"{MAX_DEVICES + 1} devices; at most {MAX_DEVICES}"):
        Platform("many", "", many, {})


def test_every_shipped_platform_is_within_bounds() -> None:
    from placement_gym.platforms import platform_names

    for name in platform_names():
        if name != "local":
            assert load_platform(name).num_devices >= 1


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["devices"][0].update(memory_bytes=True), "a number is needed"),
        (lambda s: s.update(name="cpu-igpu\nforged line"), "one line of printable text"),
        (lambda s: s["devices"][0].update(name="c\rpu"), "one line of printable text"),
        (lambda s: s.update(devices=[{"x": 1}] * 50), "and .* more"),
    ],
)
def test_booleans_control_characters_and_many_problems_are_bounded_errors(change, message) -> None:
    spec = _spec()
    change(spec)
    with pytest.raises(ConfigError, match=message) as err:
        platform_from_dict(spec)
    assert "\n" not in str(err.value) and len(str(err.value)) < 2000
