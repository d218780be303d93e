"""Loader for Apache Kafka's JSON message specs (clients/src/main/resources/common/message).

The specs are the single source of truth for the codec: ``codec.py`` generates its encoders and
decoders from the objects built here. The JSON files ship with this package under ``specs/``
(Apache-2.0, license header kept); another directory can be passed to :func:`load_specs`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

__all__ = [
    "PRIMITIVE_TYPES",
    "FieldSpec",
    "MessageSpec",
    "SchemaError",
    "StructSpec",
    "Versions",
    "default_spec_dir",
    "load_specs",
    "parse_spec_text",
    "snake_case",
]

#: Primitive type names of the spec language (``records`` is bytes holding record batches).
PRIMITIVE_TYPES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string", "bytes", "records", "uuid"}
)

_NO_VERSION_MAX = 0x7FFF


class SchemaError(ValueError):
    """A spec file is malformed or uses a construct this loader does not understand."""


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``none`` is represented by ``lo > hi``."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return cls(1, 0)
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), _NO_VERSION_MAX)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        v = int(text)
        return cls(v, v)

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def intersect(self, other: Versions) -> Versions:
        return Versions(max(self.lo, other.lo), min(self.hi, other.hi))

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi == _NO_VERSION_MAX:
            return f"{self.lo}+"
        return f"{self.lo}-{self.hi}" if self.lo != self.hi else str(self.lo)


_SNAKE_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_SNAKE_2 = re.compile(r"([a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """``ThrottleTimeMs`` -> ``throttle_time_ms``; ``isKRaftController`` -> ``is_k_raft_controller``."""
    s = _SNAKE_1.sub(r"\1_\2", name)
    s = _SNAKE_2.sub(r"\1_\2", s)
    return s.lower()


@dataclass(slots=True)
class StructSpec:
    """A struct: the message body itself, an inline struct, or a common struct."""

    name: str
    fields: list[FieldSpec]
    versions: Versions


@dataclass(slots=True)
class FieldSpec:
    """One field of a struct, with everything the codec needs about its encoding across versions."""

    name: str
    attr: str  # python attribute name (snake_case)
    type: str  # raw spec type, e.g. "int32", "[]string", "[]TopicData", "LeaderIdAndEpoch"
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    default: str | None
    ignorable: bool
    flexible_versions: Versions | None  # per-field override (only RequestHeader.ClientId uses it)
    map_key: bool
    zero_copy: bool
    about: str
    is_array: bool
    elem_type: str  # the element type for arrays, else equal to ``type``
    struct: StructSpec | None = None  # resolved struct for struct / array-of-struct fields

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    @property
    def is_primitive(self) -> bool:
        return self.elem_type in PRIMITIVE_TYPES


@dataclass(slots=True)
class MessageSpec:
    """One JSON file: a request, response, header or data (e.g. ConsumerProtocolSubscription)."""

    name: str
    kind: str  # "request" | "response" | "header" | "data" | "metadata" ...
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    struct: StructSpec
    structs: dict[str, StructSpec]  # every named struct of the message, common structs included
    latest_version_unstable: bool = False
    listeners: tuple[str, ...] = ()
    deprecated_versions: Versions = field(default_factory=lambda: Versions(1, 0))


def _strip_comments(text: str) -> str:
    """Remove ``//`` comments (whole-line and trailing) outside of JSON strings."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _parse_field(raw: dict, structs: dict[str, StructSpec], pending: list[FieldSpec], parent_versions: Versions) -> FieldSpec:
    try:
        name = raw["name"]
        ftype = raw["type"]
    except KeyError as e:
        raise SchemaError(f"field without {e}: {raw!r}") from None
    versions = Versions.parse(raw.get("versions"))
    if raw.get("versions") is None:
        raise SchemaError(f"field {name} has no versions")
    is_array = ftype.startswith("[]")
    elem = ftype[2:] if is_array else ftype
    tag = raw.get("tag")
    tagged = Versions.parse(raw.get("taggedVersions"))
    if (tag is None) != tagged.empty:
        raise SchemaError(f"field {name}: tag and taggedVersions must be given together")
    flex = raw.get("flexibleVersions")
    f = FieldSpec(
        name=name,
        attr=snake_case(name),
        type=ftype,
        versions=versions,
        nullable_versions=Versions.parse(raw.get("nullableVersions")),
        tagged_versions=tagged,
        tag=tag,
        default=None if raw.get("default") is None else str(raw["default"]),
        ignorable=bool(raw.get("ignorable", False)),
        flexible_versions=None if flex is None else Versions.parse(flex),
        map_key=bool(raw.get("mapKey", False)),
        zero_copy=bool(raw.get("zeroCopy", False)),
        about=raw.get("about", ""),
        is_array=is_array,
        elem_type=elem,
    )
    if elem not in PRIMITIVE_TYPES:
        if "fields" in raw:
            if elem in structs:
                raise SchemaError(f"struct {elem} defined twice")
            structs[elem] = StructSpec(elem, [], versions)
            structs[elem].fields = [_parse_field(r, structs, pending, versions) for r in raw["fields"]]
        pending.append(f)  # resolved once common structs are known
    elif "fields" in raw:
        raise SchemaError(f"primitive field {name} has nested fields")
    return f


def _struct_from_fields(name: str, raw_fields: list[dict], versions: Versions, structs: dict[str, StructSpec], pending: list[FieldSpec]) -> StructSpec:
    s = StructSpec(name, [], versions)
    s.fields = [_parse_field(r, structs, pending, versions) for r in raw_fields]
    return s


def parse_spec_text(text: str) -> MessageSpec:
    """Parse the text of one spec file (with its ``//`` comments)."""
    try:
        raw = json.loads(_strip_comments(text))
    except json.JSONDecodeError as e:
        raise SchemaError(f"invalid JSON: {e}") from None
    name = raw["name"]
    valid = Versions.parse(raw["validVersions"])
    structs: dict[str, StructSpec] = {}
    pending: list[FieldSpec] = []
    body = _struct_from_fields(name, raw.get("fields", []), valid, structs, pending)
    for cs in raw.get("commonStructs", []):
        if cs["name"] in structs:
            raise SchemaError(f"{name}: common struct {cs['name']} defined twice")
        structs[cs["name"]] = StructSpec(cs["name"], [], Versions.parse(cs.get("versions", "0+")))
        structs[cs["name"]].fields = [
            _parse_field(r, structs, pending, structs[cs["name"]].versions) for r in cs["fields"]
        ]
    for f in pending:
        try:
            f.struct = structs[f.elem_type]
        except KeyError:
            raise SchemaError(f"{name}: unknown type {f.elem_type!r} of field {f.name}") from None
    _check_names(name, body, structs)
    return MessageSpec(
        name=name,
        kind=raw["type"],
        api_key=raw.get("apiKey"),
        valid_versions=valid,
        flexible_versions=Versions.parse(raw.get("flexibleVersions")),
        struct=body,
        structs=structs,
        latest_version_unstable=bool(raw.get("latestVersionUnstable", False)),
        listeners=tuple(raw.get("listeners", ())),
        deprecated_versions=Versions.parse(raw.get("deprecatedVersions")),
    )


def _check_names(msg: str, body: StructSpec, structs: dict[str, StructSpec]) -> None:
    import keyword

    for s in [body, *structs.values()]:
        seen_attrs: set[str] = set()
        seen_tags: set[int] = set()
        for f in s.fields:
            if f.attr in seen_attrs or keyword.iskeyword(f.attr) or f.attr.startswith("_"):
                raise SchemaError(f"{msg}.{s.name}: unusable attribute name {f.attr!r}")
            seen_attrs.add(f.attr)
            if f.tag is not None:
                if f.tag in seen_tags:
                    raise SchemaError(f"{msg}.{s.name}: duplicate tag {f.tag}")
                seen_tags.add(f.tag)


def default_spec_dir() -> Path:
    """The packaged spec directory, overridable with ``MILLRACE_KAFKA_SPEC_DIR``."""
    env = os.environ.get("MILLRACE_KAFKA_SPEC_DIR")
    return Path(env) if env else Path(__file__).with_name("specs")


@cache
def _load_dir(path: str) -> dict[str, MessageSpec]:
    specs: dict[str, MessageSpec] = {}
    for p in sorted(Path(path).glob("*.json")):
        try:
            spec = parse_spec_text(p.read_text(encoding="utf-8"))
        except (SchemaError, KeyError, ValueError) as e:
            raise SchemaError(f"{p.name}: {e}") from None
        specs[spec.name] = spec
    if not specs:
        raise SchemaError(f"no spec files in {path}")
    return specs


def load_specs(spec_dir: str | os.PathLike[str] | None = None) -> dict[str, MessageSpec]:
    """All specs of a directory keyed by message name (cached per directory)."""
    return _load_dir(str(Path(spec_dir) if spec_dir is not None else default_spec_dir()))
