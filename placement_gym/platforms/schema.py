"""The schema of a platform file, checked with pydantic before any :class:`Device` is built.

Every field is typed, unknown keys are refused (a misspelt ``launch_overhaed`` must not silently fall
back to a default), numbers must be finite, and YAML 1.1's habit of reading ``76.8e9`` as a string is
undone by pydantic's number parsing. Errors come back as one :class:`~placement_gym.errors.ConfigError`
listing every bad field by its place in the file (``devices[1] 'gpu': mem_bandwidth``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from placement_gym.errors import ConfigError, quote
from placement_gym.platforms.bounds import MAX_DEVICES

#: Most problems one error message lists.
MAX_PROBLEMS = 10


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):  # pydantic would read true as 1.0
        raise ValueError(f"a number is needed, got {value}")
    return value


Positive = Annotated[float, BeforeValidator(_not_bool), Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, BeforeValidator(_not_bool), Field(ge=0, allow_inf_nan=False)]
#: Text without control characters (a name or description is printed on one line).
_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
#: Short names (devices, kinds, precisions, OpenVINO device strings, dictionary keys).
Name = Annotated[str, Field(min_length=1, max_length=64, pattern=_PRINTABLE)]
#: An OpenVINO compile property's value.
Property = Annotated[str, Field(max_length=256)] | bool | int | float


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeviceSpec(_Strict):
    """One entry of ``devices:`` (field meanings: :class:`placement_gym.platforms.Device`)."""

    name: Name
    kind: Name
    ov_device: Name
    precision: Name
    memory_bytes: Positive | None = None
    memory_fraction: Positive | None = None
    peak_flops: dict[Name, Positive] = Field(max_length=8)
    mem_bandwidth: Positive
    launch_overhead: NonNegative
    ov_config: dict[Name, Property] = Field(default_factory=dict, max_length=64)
    op_efficiency: dict[Name, Positive] = Field(default_factory=dict, max_length=256)
    invoke_overhead: NonNegative = 0.0
    contention: NonNegative = 0.0

    @model_validator(mode="after")
    def _one_memory(self) -> DeviceSpec:
        if (self.memory_bytes is None) == (self.memory_fraction is None):
            raise ValueError(
                "give exactly one of memory_bytes (absolute) and memory_fraction (a share of the model's "
                "weight bytes)"
            )
        return self


class LinkSpec(_Strict):
    """``default_link:`` (no endpoints) or one entry of ``links:``."""

    latency: NonNegative
    bandwidth: Positive
    blocked_bandwidth: Positive | None = None


class EndpointLinkSpec(LinkSpec):
    src: Name
    dst: Name
    bidirectional: bool = True

    @model_validator(mode="after")
    def _two_ends(self) -> EndpointLinkSpec:
        if self.src == self.dst:
            raise ValueError(
                f"link {self.src} -> {self.dst} joins a device to itself (data a device keeps is not "
                "transferred; remove the link)"
            )
        return self


class PlatformSpec(_Strict):
    """A whole platform file."""

    name: Annotated[str, Field(min_length=1, max_length=128, pattern=_PRINTABLE)]
    description: Annotated[str, Field(max_length=4096)] = ""
    host: Name | None = None
    sources: list[Annotated[str, Field(max_length=1024)]] = Field(default_factory=list, max_length=64)
    devices: list[DeviceSpec] = Field(min_length=1, max_length=MAX_DEVICES)
    default_link: LinkSpec | None = None
    links: list[EndpointLinkSpec] = Field(default_factory=list, max_length=MAX_DEVICES * (MAX_DEVICES - 1))

    @model_validator(mode="after")
    def _names_resolve(self) -> PlatformSpec:
        names = [d.name for d in self.devices]
        if len(set(names)) != len(names):
            raise ValueError(f"device names must be unique, got {names}")
        if self.host is not None and self.host not in names:
            raise ValueError(f"host {self.host!r} names no device (devices: {', '.join(names)})")
        for link in self.links:
            for end in (link.src, link.dst):
                if end not in names:
                    raise ValueError(f"link {link.src} -> {link.dst}: {end!r} names no device")
        return self


def _place(loc: tuple[Any, ...], data: Any) -> str:
    """``("devices", 1, "mem_bandwidth")`` -> ``"devices[1] 'b'.mem_bandwidth"`` (the device's name added)."""
    text, node = "", data
    for item in loc:
        if isinstance(item, int):
            node = node[item] if isinstance(node, list) and 0 <= item < len(node) else None
            named = isinstance(node, dict) and "name" in node
            text += f"[{item}]" + (f" {node['name']!r}" if named else "")
        else:
            node = node.get(item) if isinstance(node, dict) else None
            item = str(item)[:64]
            text += f".{item}" if text else item
    return text or "file"


def validate_platform(data: Any, source: str = "platform") -> PlatformSpec:
    """Check a platform's YAML/dict form against the schema.

    Args:
        data: What ``yaml.safe_load`` returned for the file.
        source: Where the data came from, for the message.

    Raises:
        ConfigError: Listing every bad or missing field and every unknown key.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a platform file must be a mapping, got {type(data).__name__}")
    try:
        return PlatformSpec.model_validate(data)
    except ValidationError as exc:
        problems = []
        errors = exc.errors()
        for err in errors[:MAX_PROBLEMS]:
            where = _place(err["loc"], data)
            quoted = err["loc"] and err["type"] not in ("missing", "extra_forbidden", "value_error")
            given = f" (got {quote(err['input'])})" if quoted else ""
            if err["type"] == "extra_forbidden":
                problems.append(f"{where}: unknown field")
            elif err["type"] == "string_pattern_mismatch":
                problems.append(f"{where}: must be one line of printable text{given}")
            else:
                problems.append(f"{where}: {err['msg'].removeprefix('Value error, ')}{given}")
        if len(errors) > MAX_PROBLEMS:
            problems.append(f"and {len(errors) - MAX_PROBLEMS} more")
        raise ConfigError(
            f"{source} {quote(data.get('name', ''))} is invalid: " + "; ".join(problems)
        ) from None
