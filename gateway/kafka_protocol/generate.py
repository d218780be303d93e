"""Writes the typed Kafka message modules (``messages/``) from Kafka's JSON message specs (``specs/``).

``python -m millrace.gateway.kafka_protocol.generate`` regenerates them; ``--check`` only reports
whether the checked-in modules are current (a test does the same, so they cannot go stale).

Only the APIs the gateway serves (:data:`APIS`) and the other specs it encodes or decodes
(:data:`DATA_SPECS`) are generated. One module per API holds its request and response; headers and
data specs (e.g. ConsumerProtocolSubscription) get a module each. Every struct of a message (the body, inline structs,
common structs) becomes a ``__slots__`` class with typed snake_case attributes, nested in the body class
(``ProduceRequest.TopicProduceData``), as Kafka's Java generator nests them. Per version, each struct
gets a specialised decoder ``(buf, pos, end) -> (obj, pos)`` and encoder ``(obj, w)``; versions with
identical code share one function, and consecutive fixed-width fields are read and written with one
precompiled ``struct.Struct`` call. Types: ints/bool/float as Python scalars, ``string`` as ``str``,
``bytes`` as ``bytes``, ``records`` as a zero-copy ``memoryview`` of the input frame when decoding (any
bytes-like object when encoding), ``uuid`` as ``uuid.UUID``, arrays as ``list``; nullable fields allow
``None``. Constructors take keyword arguments and fill the spec defaults for the rest.
"""

from __future__ import annotations

import argparse
import re
import struct
import sys
from pathlib import Path

from millrace.gateway.kafka_protocol import primitives
from millrace.gateway.kafka_protocol.schema import FieldSpec, MessageSpec, StructSpec, load_specs, snake_case

#: The APIs generated: exactly those the gateway serves (``gateway/kafka/handlers/``; a test keeps the two
#: equal). To serve another API, add it here and regenerate.
APIS = frozenset({
    "AlterConfigs", "ApiVersions", "CreatePartitions", "CreateTopics", "DeleteGroups", "DeleteRecords",
    "DeleteTopics", "DescribeCluster", "DescribeConfigs", "DescribeGroups", "Fetch", "FindCoordinator",
    "Heartbeat", "IncrementalAlterConfigs", "InitProducerId", "JoinGroup", "LeaveGroup", "ListGroups",
    "ListOffsets", "Metadata", "OffsetCommit", "OffsetDelete", "OffsetFetch", "OffsetForLeaderEpoch",
    "Produce", "SyncGroup",
    "AddOffsetsToTxn", "AddPartitionsToTxn", "DescribeTransactions", "EndTxn", "ListTransactions",
    "TxnOffsetCommit", "WriteTxnMarkers",
    "DescribeTopicPartitions", "DescribeLogDirs", "AlterReplicaLogDirs", "DescribeProducers",
    "ElectLeaders", "AlterPartitionReassignments", "ListPartitionReassignments", "DescribeQuorum",
    "ConsumerGroupHeartbeat", "ConsumerGroupDescribe",
    "SaslHandshake", "SaslAuthenticate", "AlterUserScramCredentials", "DescribeUserScramCredentials",
    "CreateAcls", "DescribeAcls", "DeleteAcls",
    "AlterClientQuotas", "DescribeClientQuotas",
})
#: Specs generated that are not APIs: the frame headers and the consumer protocol's subscription.
DATA_SPECS = frozenset({"RequestHeader", "ResponseHeader", "ConsumerProtocolSubscription", "ConsumerProtocolAssignment"})

SPEC_DIR = Path(__file__).with_name("specs")
MESSAGES_DIR = Path(__file__).with_name("messages")
COMMAND = "python -m millrace.gateway.kafka_protocol.generate"

_FIXED: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
}
_PY_TYPES = {
    "int8": "int", "int16": "int", "uint16": "int", "int32": "int", "uint32": "int", "int64": "int",
    "float64": "float", "bool": "bool", "string": "str", "bytes": "bytes", "records": "Buffer",
    "uuid": "uuid.UUID",
}  # fmt: skip
# Names a generated module may import from primitives (those it uses are imported).
_RUNTIME_NAMES = sorted(
    [*primitives.__all__, *(n for n in vars(primitives) if n.startswith("_") and not n.startswith("__"))]
)


def _default_literal(f: FieldSpec, cls_ref: str | None) -> str:
    """Python expression for the field's default (a fresh object for mutable values)."""
    d = f.default
    if f.is_array:
        return "None" if d == "null" else "[]"
    if f.struct is not None:
        return "None" if d == "null" else f"{cls_ref}()"
    t = f.type
    if d == "null":
        return "None"
    if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return str(int(d, 0)) if d else "0"
    if t == "float64":
        return repr(float(d)) if d else "0.0"
    if t == "bool":
        return "True" if (d or "false").lower() == "true" else "False"
    if t == "string":
        return repr(d or "")
    if t == "bytes":
        return 'b""'
    if t == "records":
        return "None"
    if t == "uuid":
        return "_ZERO_UUID"
    raise AssertionError(t)


def _first_flexible(spec: MessageSpec) -> int | None:
    fv = spec.flexible_versions
    if fv.empty:
        return None
    if fv.hi < spec.valid_versions.hi:
        raise ValueError(f"{spec.name}: flexible versions {fv} do not run to the last version")
    return fv.lo


def _oneline(text: str) -> str:
    return " ".join(text.split())


class _Module:
    """The text of one generated module: classes, then codec functions, then version tables."""

    def __init__(self) -> None:
        self.classes: list[str] = []
        self.aliases: list[str] = []
        self.functions: list[str] = []
        self.tables: list[str] = []
        self.structs: dict[str, str] = {}  # struct format -> module-level name
        self._bodies: dict[str, str] = {}  # function text -> function name

    def struct_obj(self, fmt: str) -> str:
        """Name of a module-level precompiled big-endian ``struct.Struct`` for ``fmt``."""
        name = "_S_" + fmt.replace("?", "o")
        self.structs[fmt] = name
        return name

    def function(self, name: str, lines: list[str]) -> str:
        """Add a function named ``name`` unless one with the same text exists (``__FN__`` stands for
        the name in ``lines``); return the name of the one to call."""
        body = "\n".join(lines)
        existing = self._bodies.get(body)
        if existing is not None:
            return existing
        self._bodies[body] = name
        self.functions.append(body.replace("__FN__", name, 1))
        return name

    def render(self, docstring: str) -> str:
        code = "\n\n\n".join(self.classes) + "\n\n\n" + "\n".join(self.aliases)
        if self.structs:
            code += "\n" + "\n".join(f'{n} = struct.Struct(">{fmt}")' for fmt, n in sorted(self.structs.items()))
        code += "\n\n\n" + "\n\n\n".join(self.functions) + "\n\n\n" + "\n\n".join(self.tables) + "\n"
        bare = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("#", '"""')))
        used = [n for n in _RUNTIME_NAMES if re.search(rf"(?<![\w.]){re.escape(n)}\b", bare)]
        head = [f'"""{docstring}"""', "", "from __future__ import annotations", ""]
        stdlib = [m for m in ("struct", "uuid") if re.search(rf"\b{m}\.", bare)]
        if stdlib:
            head += [f"import {m}" for m in stdlib] + [""]
        head += ["from millrace.gateway.kafka_protocol.primitives import ("]
        head += [f"    {n}," for n in sorted(used, key=_isort_key)]
        head += [")", "", "", ""]
        return "\n".join(head) + code


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's isort order within one import: CONSTANTS, then Classes, then everything else.
    bare = name.lstrip("_")
    if bare.isupper() or (bare.upper() == bare and any(c.isalpha() for c in bare)):
        return 0, name
    if bare[:1].isupper():
        return 1, name
    return 2, name


class _MessageGen:
    """Generates the classes and per-version codecs of one spec into a module."""

    def __init__(self, spec: MessageSpec, mod: _Module) -> None:
        self.spec = spec
        self.mod = mod

    # names and types ---------------------------------------------------------------------------
    def qual(self, s: StructSpec) -> str:
        return self.spec.name if s is self.spec.struct else f"{self.spec.name}.{s.name}"

    def alias(self, s: StructSpec) -> str:
        """Module-level alias of a struct class, so the codec functions need one global lookup."""
        return "_C_" + self.qual(s).replace(".", "_")

    def default(self, f: FieldSpec) -> str:
        return _default_literal(f, self.alias(f.struct) if f.struct else None)

    def optional(self, f: FieldSpec) -> bool:
        return not f.nullable_versions.empty or self.default(f) == "None"

    def field_type(self, f: FieldSpec) -> str:
        base = self.qual(f.struct) if f.struct is not None else _PY_TYPES[f.elem_type]
        t = f"list[{base}]" if f.is_array else base
        return f"{t} | None" if self.optional(f) else t

    def _flex(self, f: FieldSpec, version: int, flex: bool) -> bool:
        return version in f.flexible_versions if f.flexible_versions is not None else flex

    # classes ------------------------------------------------------------------------------------
    def classes(self) -> None:
        self.mod.classes.append("\n".join(self._class(self.spec.struct, "")))
        for s in [self.spec.struct, *self.spec.structs.values()]:
            self.mod.aliases.append(f"{self.alias(s)} = {self.qual(s)}")

    def _class(self, s: StructSpec, ind: str) -> list[str]:
        spec = self.spec
        body = s is spec.struct
        base = "KafkaStruct"
        if body and spec.api_key is not None:
            base = {"request": "KafkaRequest", "response": "KafkaResponse"}.get(spec.kind, base)
        doc = (
            f"Kafka {spec.name}, versions {spec.valid_versions} (generated from {spec.name}.json)."
            if body
            else f"{spec.name} struct {s.name}."
        )
        attrs = [f.attr for f in s.fields]
        out = [f"{ind}class {s.name}({base}):", f'{ind}    """{doc}"""', ""]
        slots = ", ".join(f'"{a}"' for a in [*attrs, "_unknown_tagged_fields"])
        out.append(f"{ind}    __slots__ = ({slots})")
        if body and base != "KafkaStruct":
            out.append(f"{ind}    API_KEY = {spec.api_key}")
        fields = ", ".join(f'"{a}"' for a in attrs) + ("," if len(attrs) == 1 else "")
        out.append(f"{ind}    _fields = ({fields})")
        out.append("")
        for f in s.fields:
            if f.about:
                out.append(f"{ind}    #: {_oneline(f.about)}")
            out.append(f"{ind}    {f.attr}: {self.field_type(f)}")
        params = []
        assigns = []
        for f in s.fields:
            d = self.default(f)
            t = self.field_type(f)
            if d == "[]" or d.endswith("()"):
                t = t if t.endswith(" | None") else f"{t} | None"
                params.append(f"{f.attr}: {t} = None")
                assigns.append(f"{ind}        self.{f.attr} = {d} if {f.attr} is None else {f.attr}")
            else:
                params.append(f"{f.attr}: {t} = {d}")
                assigns.append(f"{ind}        self.{f.attr} = {f.attr}")
        params.append("_unknown_tagged_fields: list[tuple[int, bytes]] | None = None")
        assigns.append(f"{ind}        self._unknown_tagged_fields = _unknown_tagged_fields")
        if s.fields:
            out.append("")
        out.append(f"{ind}    def __init__(")
        out.append(f"{ind}        self,")
        out.append(f"{ind}        *,")
        out += [f"{ind}        {p}," for p in params]
        out.append(f"{ind}    ) -> None:")
        out += assigns
        if body:
            for nested in spec.structs.values():
                out.append("")
                out += self._class(nested, ind + "    ")
        return out

    # decoding -----------------------------------------------------------------------------------
    def _read_value(self, f: FieldSpec, version: int, flex: bool, target: str, end: str, ind: str,
                    out: list[str], elem: bool = False) -> None:
        """Lines that read one value of ``f`` (or one array element if ``elem``) into ``target``."""
        t = f.elem_type
        fflex = self._flex(f, version, flex)
        nullable = version in f.nullable_versions and not elem
        if not elem and f.is_array:
            out.append(f"{ind}n, pos = {'_rd_calen' if fflex else '_rd_alen'}(buf, pos, {end})")
            out.append(f"{ind}if n < 0:")
            out.append(f"{ind}    {target} = None" if nullable else f"{ind}    raise _null_array({f.name!r})")
            out.append(f"{ind}else:")
            if t in _FIXED:
                code, size = _FIXED[t]
                out.append(f"{ind}    {target}, pos = _unpack_array({code!r}, {size}, buf, pos, n, {end})")
            else:
                elem_t = self.qual(f.struct) if f.struct is not None else _PY_TYPES[t]
                lst, add, x = f"lst_{f.attr}", f"add_{f.attr}", f"x_{f.attr}"
                out.append(f"{ind}    {lst}: list[{elem_t}] = []")
                out.append(f"{ind}    {add} = {lst}.append")
                out.append(f"{ind}    for _ in range(n):")
                self._read_value(f, version, flex, x, end, ind + "        ", out, elem=True)
                out.append(f"{ind}        {add}({x})")
                out.append(f"{ind}    {target} = {lst}")
            return
        if f.struct is not None:
            fn = self.decoder(f.struct, version)
            if nullable:
                out.append(f"{ind}if _u_i8(buf, pos)[0] < 0:")
                out.append(f"{ind}    {target} = None")
                out.append(f"{ind}    pos += 1")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {target}, pos = {fn}(buf, pos + 1, {end})")
            else:
                out.append(f"{ind}{target}, pos = {fn}(buf, pos, {end})")
            return
        if t in _FIXED:
            code, size = _FIXED[t]
            out.append(f"{ind}if pos + {size} > {end}:")
            out.append(f"{ind}    raise _trunc({f.name!r})")
            out.append(f"{ind}({target},) = {self.mod.struct_obj(code)}.unpack_from(buf, pos)")
            out.append(f"{ind}pos += {size}")
            return
        if t == "uuid":
            out.append(f"{ind}{target}, pos = _rd_uuid(buf, pos, {end})")
            return
        base = {"string": "str", "bytes": "bytes", "records": "mv"}[t]
        fn = "_rd_" + ("c" if fflex else "") + ("n" if nullable else "") + base
        out.append(f"{ind}{target}, pos = {fn}(buf, pos, {end})")

    def decoder(self, s: StructSpec, version: int) -> str:
        flex = version in self.spec.flexible_versions
        q = self.qual(s)
        out = [f"def __FN__(buf: memoryview, pos: int, end: int) -> tuple[{q}, int]:", f"    o = _new({self.alias(s)})"]
        tagged: list[FieldSpec] = []
        run: list[FieldSpec] = []

        def flush() -> None:
            if not run:
                return
            fmt = "".join(_FIXED[f.type][0] for f in run)
            targets = ", ".join(f"o.{f.attr}" for f in run)
            if len(run) == 1:
                targets = f"({targets},)"
            out.append(f"    {targets} = {self.mod.struct_obj(fmt)}.unpack_from(buf, pos)")
            out.append(f"    pos += {struct.calcsize('>' + fmt)}")
            run.clear()

        for f in s.fields:
            if version not in f.versions or (f.tag is not None and (not flex or version not in f.tagged_versions)):
                flush()
                out.append(f"    o.{f.attr} = {self.default(f)}")
                continue
            if f.tag is not None:
                tagged.append(f)
                out.append(f"    o.{f.attr} = {self.default(f)}")
                continue
            if f.type in _FIXED:
                run.append(f)
                continue
            flush()
            self._read_value(f, version, flex, f"o.{f.attr}", "end", "    ", out)
        flush()
        out.append("    o._unknown_tagged_fields = None")
        if flex:
            # Most structs carry no tagged field: one byte, 0, read without a call.
            out.append("    if buf[pos] == 0:")
            out.append("        pos += 1")
            out.append("    else:")
            if not tagged:
                out.append("        o._unknown_tagged_fields, pos = _rd_unknown_tags(buf, pos, end)")
            else:
                out.append("        nt, pos = _rd_uv(buf, pos)")
                out.append("        for _ in range(nt):")
                out.append("            tag, pos = _rd_uv(buf, pos)")
                out.append("            sz, pos = _rd_uv(buf, pos)")
                out.append("            te = pos + sz")
                out.append("            if te > end:")
                out.append("                raise _trunc('tagged field')")
                kw = "if"
                for f in sorted(tagged, key=lambda f: f.tag or 0):
                    out.append(f"            {kw} tag == {f.tag}:")
                    self._read_value(f, version, flex, f"o.{f.attr}", "te", "                ", out)
                    kw = "elif"
                out.append("            else:")
                out.append("                o._unknown_tagged_fields = _keep_unknown_tag(o._unknown_tagged_fields, tag, buf[pos:te])")
                out.append("            pos = te")
        out.append("    return o, pos")
        return self.mod.function(self._fn_name("_d", s, version), out)

    def _fn_name(self, kind: str, s: StructSpec, version: int) -> str:
        """A function is named after its struct and the first version it serves."""
        return f"{kind}_{self.qual(s).replace('.', '_')}_v{version}"

    # encoding -----------------------------------------------------------------------------------
    def _write_value(self, f: FieldSpec, version: int, flex: bool, expr: str, w: str, ind: str,
                     out: list[str], elem: bool = False) -> None:
        t = f.elem_type
        fflex = self._flex(f, version, flex)
        nullable = version in f.nullable_versions and not elem
        # A field that may hold None in other versions must not be None in this one.
        guard = not elem and not nullable and self.optional(f)
        if guard or (not elem and f.is_array):
            v = f"v_{f.attr}"
            out.append(f"{ind}{v} = {expr}")
            expr = v
            if guard:
                out.append(f"{ind}if {v} is None:")
                out.append(f"{ind}    raise _null_value({f.name!r})")
        if not elem and f.is_array:
            if nullable:
                out.append(f"{ind}if {expr} is None:")
                out.append(f"{ind}    {w}({'_UVB0' if fflex else '_NULL32'})")
                out.append(f"{ind}else:")
                ind += "    "
            out.append(f"{ind}{w}({f'_uv(len({expr}) + 1)' if fflex else f'_p_i32(len({expr}))'})")
            if t in _FIXED:
                out.append(f"{ind}{w}(_pack(f\">{{len({expr})}}{_FIXED[t][0]}\", *{expr}))")
            else:
                x = f"x_{f.attr}"
                out.append(f"{ind}for {x} in {expr}:")
                self._write_value(f, version, flex, x, w, ind + "    ", out, elem=True)
            return
        if f.struct is not None:
            fn = self.encoder(f.struct, version)
            if nullable:
                out.append(f"{ind}if {expr} is None:")
                out.append(f"{ind}    {w}(b'\\xff')")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {w}(b'\\x01')")
                out.append(f"{ind}    {fn}({expr}, {w})")
            else:
                out.append(f"{ind}{fn}({expr}, {w})")
            return
        if t in _FIXED:
            out.append(f"{ind}{w}({self.mod.struct_obj(_FIXED[t][0])}.pack({expr}))")
            return
        if t == "uuid":
            out.append(f"{ind}{w}({expr}.bytes)")
            return
        base = {"string": "str", "bytes": "bytes", "records": "bytes"}[t]
        fn = "_w_" + ("c" if fflex else "") + ("n" if nullable else "") + base
        out.append(f"{ind}{fn}({expr}, {w})")

    def _non_default(self, f: FieldSpec, expr: str) -> str:
        """An expression true when ``expr`` differs from the field's default."""
        d = self.default(f)
        if d == "[]":
            return expr
        if d == "None":
            return f"{expr} is not None"
        if d == "False":
            return expr
        if d == "True":
            return f"not {expr}"
        return f"{expr} != {d}"

    def encoder(self, s: StructSpec, version: int) -> str:
        flex = version in self.spec.flexible_versions
        out = [f"def __FN__(o: {self.qual(s)}, w: Writer) -> None:"]
        tagged: list[FieldSpec] = []
        run: list[FieldSpec] = []

        def flush() -> None:
            if not run:
                return
            fmt = "".join(_FIXED[f.type][0] for f in run)
            args = ", ".join(f"o.{f.attr}" for f in run)
            out.append(f"    w({self.mod.struct_obj(fmt)}.pack({args}))")
            run.clear()

        for f in s.fields:
            present = version in f.versions
            if present and f.tag is not None and (not flex or version not in f.tagged_versions):
                present = False
            if not present:
                if not f.ignorable:
                    flush()
                    out.append(f"    if {self._non_default(f, 'o.' + f.attr)}:")
                    out.append(f"        raise _not_in_version({f.name!r})")
                continue
            if f.tag is not None:
                tagged.append(f)
                continue
            if f.type in _FIXED:
                run.append(f)
                continue
            flush()
            self._write_value(f, version, flex, "o." + f.attr, "w", "    ", out)
        flush()
        if flex:
            if not tagged:
                out.append("    u = o._unknown_tagged_fields")
                out.append("    if u:")
                out.append("        _w_tagged(list(u), w)")
                out.append("    else:")
                out.append("        w(_UVB0)")
            else:
                out.append("    tg = list(o._unknown_tagged_fields or ())")
                for f in sorted(tagged, key=lambda f: f.tag or 0):
                    buf, wt = f"b_{f.attr}", f"w_{f.attr}"
                    out.append(f"    if {self._non_default(f, 'o.' + f.attr)}:")
                    out.append(f"        {buf}: list[Buffer] = []")
                    out.append(f"        {wt} = {buf}.append")
                    self._write_value(f, version, flex, "o." + f.attr, wt, "        ", out)
                    out.append(f"        tg.append(({f.tag}, b''.join({buf})))")
                out.append("    if tg:")
                out.append("        _w_tagged(tg, w)")
                out.append("    else:")
                out.append("        w(_UVB0)")
        if len(out) == 1:
            out.append("    pass")
        return self.mod.function(self._fn_name("_e", s, version), out)

    # version tables -----------------------------------------------------------------------------
    def table(self) -> str:
        spec = self.spec
        name = spec.name
        const = snake_case(name).upper() + "_CODECS"
        rows = []
        for v in range(spec.valid_versions.lo, spec.valid_versions.hi + 1):
            rows.append(f"    {v}: ({self.encoder(spec.struct, v)}, {self.decoder(spec.struct, v)}),")
        return "\n".join([
            f"#: (encoder, decoder) of {name} by version",
            f"{const}: dict[int, tuple[Encoder[{name}], Decoder[{name}]]] = {{",
            *rows,
            "}",
        ])


def module_name(spec: MessageSpec) -> str:
    """The generated module of a spec: its API's for requests and responses, else its own."""
    return snake_case(_api_name(spec) or spec.name)


def _api_name(spec: MessageSpec) -> str | None:
    if spec.api_key is None or spec.kind not in ("request", "response"):
        return None
    return spec.name.removesuffix("Request").removesuffix("Response")


def select(specs: dict[str, MessageSpec]) -> dict[str, MessageSpec]:
    """The specs to generate: those of :data:`APIS` and :data:`DATA_SPECS`."""
    chosen = {n: s for n, s in specs.items() if n in DATA_SPECS or _api_name(s) in APIS}
    missing = (APIS | DATA_SPECS) - {_api_name(s) or s.name for s in chosen.values()}
    if missing:
        raise ValueError(f"no specs for {sorted(missing)}")
    return chosen


def render(specs: dict[str, MessageSpec]) -> dict[str, str]:
    """Every generated module's text by file name (``__init__.py`` included) for the selected specs."""
    specs = select(specs)
    groups: dict[str, list[MessageSpec]] = {}
    for spec in sorted(specs.values(), key=lambda s: (s.kind != "request", s.name)):
        groups.setdefault(module_name(spec), []).append(spec)
    files: dict[str, str] = {}
    for mod_name, group in sorted(groups.items()):
        mod = _Module()
        for spec in group:
            gen = _MessageGen(spec, mod)
            gen.classes()
            mod.tables.append(gen.table())
        sources = " and ".join(f"specs/{s.name}.json" for s in group)
        title = group[0].name.removesuffix("Request") if len(group) > 1 else group[0].name
        key = f" (api key {group[0].api_key})" if group[0].api_key is not None else ""
        doc = f"Kafka {title}{key}: generated by ``{COMMAND}`` from {sources}; do not edit."
        files[f"{mod_name}.py"] = mod.render(doc)
    files["__init__.py"] = _render_index(specs)
    return files


def _render_index(specs: dict[str, MessageSpec]) -> str:
    requests = {s.api_key: s for s in specs.values() if s.kind == "request" and s.api_key is not None}
    responses = {s.api_key: s for s in specs.values() if s.kind == "response" and s.api_key is not None}
    rows = []
    for api_key, spec in sorted(requests.items()):
        resp = responses[api_key]
        if resp.valid_versions != spec.valid_versions:
            raise ValueError(f"{spec.name}: request and response versions differ")
        rows.append(
            f"    {spec.api_key}: ApiInfo({spec.api_key}, {spec.name.removesuffix('Request')!r}, "
            f"{module_name(spec)!r}, {spec.valid_versions.lo}, {spec.valid_versions.hi}, "
            f"{_first_flexible(spec)}, {_first_flexible(resp)}, {spec.latest_version_unstable}, "
            f"{spec.listeners!r}),"
        )
    modules = [f"    {name!r}: {module_name(specs[name])!r}," for name in sorted(specs)]
    return "\n".join([
        f'"""Typed Kafka messages: generated by ``{COMMAND}`` from specs/; do not edit.',
        "",
        "One module per API the gateway serves (its request and response), one per header or data spec.",
        '``API_KEYS`` lists the APIs; ``SPEC_MODULES`` names the module of every spec."""',
        "",
        "from __future__ import annotations",
        "",
        "from millrace.gateway.kafka_protocol.primitives import ApiInfo",
        "",
        "API_KEYS: dict[int, ApiInfo] = {",
        *rows,
        "}",
        "",
        "SPEC_MODULES: dict[str, str] = {",
        *modules,
        "}",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether messages/ is current")
    args = parser.parse_args(argv)
    files = render(load_specs(SPEC_DIR))
    existing = {p.name for p in MESSAGES_DIR.glob("*.py")}
    stale = sorted(n for n in files if not (MESSAGES_DIR / n).exists() or (MESSAGES_DIR / n).read_text() != files[n])
    extra = sorted(existing - files.keys())
    if args.check:
        for name in stale + extra:
            print(f"out of date: {MESSAGES_DIR / name}", file=sys.stderr)
        return 1 if stale or extra else 0
    MESSAGES_DIR.mkdir(exist_ok=True)
    for name in stale:
        (MESSAGES_DIR / name).write_text(files[name])
    for name in extra:
        (MESSAGES_DIR / name).unlink()
    print(f"{len(stale)} written, {len(extra)} removed, {len(files) - len(stale)} unchanged in {MESSAGES_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
