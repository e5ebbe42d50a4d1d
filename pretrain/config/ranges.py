"""The range of every count, size and rate in the schema, declared beside the key.

A schema field says `hidden_size: int = between(1, 2**20)`; `problems_of(node, kind, prefix)` walks
a config node against its dataclass and returns one line per value outside its range (validate.py
walks the whole composed config with it). The cross-field
rules in validate.py run only on a config whose values are in range, so they never divide by a
zero head count or plan a model of -3.4 M parameters. Derived values (`derived()`) come from
resolvers and are judged by the rule that explains them (e.g. the batch rule for grad_accum).
"""
import dataclasses
import math
import typing
from dataclasses import field
from typing import Any, Iterator, Tuple

from omegaconf import MISSING, DictConfig, OmegaConf

RANGE = "range"
DERIVED = "derived"


def between(low: float, high: float, default: Any = MISSING, *, low_open: bool = False,
            high_open: bool = False) -> Any:
    """A schema field whose value must lie in [low, high] ((low or high) with the *_open flags);
    None passes where the field is Optional."""
    return field(default=default, metadata={RANGE: (low, high, low_open, high_open)})


def derived(default: Any = MISSING) -> Any:
    """A field computed by a resolver from other keys: no range of its own."""
    return field(default=default, metadata={DERIVED: True})


def bounds_text(low: float, high: float, low_open: bool, high_open: bool) -> str:
    return f"{'(' if low_open else '['}{_num(low)}, {_num(high)}{')' if high_open else ']'}"


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def out_of_range(value: Any, bounds: Tuple) -> bool:
    low, high, low_open, high_open = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return True
    return (value <= low if low_open else value < low) or (value >= high if high_open else value > high)


def range_problem(key: str, value: Any, bounds: Tuple) -> Iterator[str]:
    """The line for `key`'s value outside `bounds` (a field's RANGE), if it is."""
    if out_of_range(value, bounds):
        yield f"{key}={value} must be in {bounds_text(*bounds)}"


def problems_of(node: Any, schema: type, key: str) -> Iterator[str]:
    """Out-of-range values of `node` (a DictConfig of dataclass `schema`) under the dotted `key`."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        kind = _unwrap(hints[f.name])
        nested = dataclasses.is_dataclass(kind) or typing.get_origin(kind) is dict
        if f.name not in node or not (RANGE in f.metadata or nested) or _derived(node, f.name):
            continue
        value = node[f.name]
        where = f"{key}.{f.name}"
        if RANGE in f.metadata:
            if value is not None:
                yield from range_problem(where, value, f.metadata[RANGE])
        elif dataclasses.is_dataclass(kind) and isinstance(value, DictConfig):
            yield from problems_of(value, kind, where)
        elif isinstance(value, DictConfig):
            inner = _unwrap(typing.get_args(kind)[1])
            if dataclasses.is_dataclass(inner):
                for name, item in value.items():
                    yield from problems_of(item, inner, f"{where}.{name}")


def _derived(node: Any, name: str) -> bool:
    """`key: ${...}`: a value computed from other keys is judged where those are set (and by the
    cross-field rules), once; reading it would also pay for resolving the interpolation."""
    return isinstance(node, DictConfig) and OmegaConf.is_interpolation(node, name)


def numeric_fields(schema: type, prefix: str = "") -> Iterator[Tuple[str, dataclasses.Field, type]]:
    """(dotted key, field, type) of every int/float field of `schema` and the dataclasses it holds."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        kind = _unwrap(hints[f.name])
        if kind in (int, float):
            yield f"{prefix}{f.name}", f, kind
        elif dataclasses.is_dataclass(kind):
            yield from numeric_fields(kind, f"{prefix}{f.name}.")


def _unwrap(kind: Any) -> Any:
    """Optional[X] -> X."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if typing.get_origin(kind) is typing.Union and len(args) == 1 else kind


