"""Declarative checks of a profile's fields: each key stated once, each kind of value checked and reported one way.

A profile (a study's, a backbone's, a grid's) is a YAML mapping. Its loader declares every key of a block once as
a ``Field`` (a kind such as ``INT``, ``BOOL``, ``NAMES`` or ``CHOICE``; the values or range allowed; a default;
whether it is required or may be null), gathered in ``Fields``. ``Checker.read`` checks a mapping against them and
returns ``Values``: the values with defaults filled in, and which keys the mapping gave. A wrong value raises the
loader's own error (the ``error`` a ``Checker`` is given; ``ProfileError("<where>: <message>")`` by default),
naming the file, the key and what is allowed, e.g. ``'context.overflow' must be one of ('refuse',
'truncate_oldest'), got 'truncate'``. The one-value checks (``integer``, ``boolean``, ``names``, ...) serve the
rules a spec cannot state, such as a key that depends on another. Imports nothing of the kit (docs/layout.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

# the kinds of value a field may hold
ANY = "any"  # anything (the loader checks it)
INT = "int"  # an integer (not a bool), at least ``minimum`` when given
NUMBER = "number"  # an int or a float (not a bool), within ``minimum`` / ``maximum`` when given
BOOL = "bool"  # true or false
STR = "str"  # a non-empty string
TEXT = "text"  # any string, the empty one included
NAMES = "names"  # a non-empty list of distinct non-empty strings (from ``choices`` when given); a single string reads as a list of one
CHOICE = "choice"  # one of ``choices``
MAPPING = "mapping"  # a mapping (null reads as {}), its keys from ``keys`` when given
KINDS = (ANY, INT, NUMBER, BOOL, STR, TEXT, NAMES, CHOICE, MAPPING)


class ProfileError(ValueError):
    """A profile field is malformed (the default error of a ``Checker``); the message names the file and the key."""


@dataclass(frozen=True)
class Field:
    """One key of a profile block: its kind and what it allows, its default, whether it is required or nullable.

    ``default`` is the value when the key is absent (a required key has none; a mapping's is a fresh dict, {} for
    None); ``nullable`` lets an explicit null through as None (without it null is checked like any value).
    ``test`` is one more rule a value of the right kind must pass (e.g. ``lambda v: v > 0``), stated in ``what``;
    ``what`` replaces the kind's own words for what is allowed in the error message ("or null" is added to either
    for a nullable field)."""

    key: str
    kind: str = ANY
    default: Any = None
    required: bool = False
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None
    choices: Collection[Any] | None = None
    keys: Collection[str] | None = None  # a MAPPING's allowed keys (None: any)
    what: str | None = None
    test: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"field {self.key!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == CHOICE and not self.choices:
            raise ValueError(f"field {self.key!r}: a choice needs choices")
        if self.required and self.default is not None:
            raise ValueError(f"field {self.key!r}: a required field has no default")

    def describe(self) -> str:
        """What the field allows, in words ("an integer >= 1 or null", "one of ('a', 'b')")."""
        text = (
            self.what
            or {
                ANY: "a value",
                INT: "an integer" + _range(self.minimum, self.maximum),
                NUMBER: "a number" + _range(self.minimum, self.maximum),
                BOOL: "true or false",
                STR: "a non-empty string",
                TEXT: "a string",
                NAMES: "a non-empty list of names",
                CHOICE: f"one of {self.choices}",
                MAPPING: f"a mapping with keys from {sorted(self.keys)}" if self.keys else "a mapping",
            }[self.kind]
        )
        return text + (" or null" if self.nullable and self.kind != MAPPING else "")


def _range(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    return f" <= {maximum}" if maximum is not None else ""


class Fields:
    """The fields of one profile block, in order; ``keys`` are the keys the block allows."""

    def __init__(self, *fields: Field) -> None:
        keys = [f.key for f in fields]
        if len(set(keys)) != len(keys):
            raise ValueError(f"a block states a key twice: {keys}")
        self.fields = fields
        self.keys = frozenset(keys)

    def __getitem__(self, key: str) -> Field:
        return next(f for f in self.fields if f.key == key)


class Values(dict):
    """A block's values by key, defaults filled in; ``given`` holds the keys the profile itself set."""

    given: frozenset[str] = frozenset()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Checker:
    """Checks the values of one profile file; every error names ``where`` (through ``error``) and the key, written
    as ``label`` says (``"{key!r}"``: ``'pool.seed'``; ``"field {key!r}"``: ``field 'model'``)."""

    def __init__(self, where: Any, error: Callable[[str], Exception] | None = None, *, label: str = "{key!r}") -> None:
        self.where = where
        self._error = error if error is not None else (lambda message: ProfileError(f"{where}: {message}"))
        self._label = label

    def fail(self, message: str) -> Exception:
        """The loader's error for ``message`` (to be raised by the caller)."""
        return self._error(message)

    # -- a block --------------------------------------------------------------------------------------------

    def read(self, value: Any, key: str | None, spec: Fields) -> Values:
        """``value`` (a mapping, null for {}) checked against ``spec``: an unknown key, a missing required key or
        a malformed value raises; returns every field's value, its default where the mapping does not give it.
        ``key`` is the block's own key (None: the top level), which prefixes every key named in an error."""
        data = self.mapping(value, key, spec.keys) if key is not None else self._top(value, spec.keys)
        out = Values()
        for f in spec.fields:
            full = f"{key}.{f.key}" if key else f.key
            if f.key in data:
                out[f.key] = self.value(data[f.key], full, f)
            elif f.required:
                raise self.fail(f"{self._label.format(key=full)} must be {f.describe()}; it is missing")
            else:  # a mapping's default is a fresh dict, so a caller may change what it gets
                out[f.key] = self.mapping(f.default, full, f.keys) if f.kind == MAPPING else f.default
        out.given = frozenset(data)
        return out

    def _top(self, value: Any, allowed: Collection[str]) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail("must hold a mapping of settings")
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise self.fail(f"unknown key(s) {unknown}; allowed: {sorted(allowed)}")
        return dict(value)

    def value(self, value: Any, key: str, f: Field) -> Any:
        """One value checked against its field (``key``: its full dotted name)."""
        if value is None and f.nullable:
            return None
        kind = f.kind
        if kind == MAPPING:
            return self.mapping(value, key, f.keys, what=f.what)
        if kind == NAMES:
            names = self.names(value, key)
            unknown = [n for n in names if f.choices is not None and n not in f.choices]
            if unknown:
                listed = ", ".join(map(repr, unknown))
                raise self.fail(
                    f"{self._label.format(key=key)}: unknown {listed}; expected names from {tuple(f.choices)}"
                )
            return names
        if kind in (INT, NUMBER):
            ok = _is_int(value) if kind == INT else _is_number(value)
            ok = ok and (f.minimum is None or value >= f.minimum) and (f.maximum is None or value <= f.maximum)
        elif kind == BOOL:
            ok = isinstance(value, bool)
        elif kind in (STR, TEXT):
            ok = isinstance(value, str) and (kind == TEXT or bool(value))
        elif kind == CHOICE:
            ok = isinstance(value, (str, int, float, bool, type(None))) and value in f.choices  # type: ignore[operator]
        else:
            ok = True
        if not ok or (f.test is not None and not f.test(value)):
            raise self.fail(f"{self._label.format(key=key)} must be {f.describe()}, got {value!r}")
        return value

    # -- one value (the rules a spec cannot state) ---------------------------------------------------------------

    def mapping(self, value: Any, key: str, allowed: Collection[str] | None, *, what: str | None = None) -> dict:
        """``value`` as a dict ({} for null); keys outside ``allowed`` (when given) are named in the error."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            expected = what or (f"a mapping with keys from {sorted(allowed)}" if allowed else "a mapping")
            raise self.fail(f"{self._label.format(key=key)} must be {expected}, got {value!r}")
        if allowed is not None:
            unknown = sorted(set(value) - set(allowed))
            if unknown:
                raise self.fail(
                    f"unknown key(s) {[f'{key}.{u}' for u in unknown]}; allowed in {key!r}: {sorted(allowed)}"
                )
        return dict(value)

    def integer(self, value: Any, key: str, *, minimum: int = 0, optional: bool = False) -> Any:
        """An integer >= ``minimum`` (``optional``: or null)."""
        return self.value(value, key, Field(key, INT, minimum=minimum, nullable=optional))

    def boolean(self, value: Any, key: str) -> bool:
        return bool(self.value(value, key, Field(key, BOOL)))

    def choice(self, value: Any, key: str, choices: Collection[Any]) -> Any:
        return self.value(value, key, Field(key, CHOICE, choices=choices))

    def names(self, value: Any, key: str) -> list[str]:
        """A non-empty list of distinct non-empty strings (a single string: a list of one)."""
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(x, str) and x for x in items):
            raise self.fail(f"{self._label.format(key=key)} must be a non-empty list of names, got {value!r}")
        if len(set(items)) != len(items):
            raise self.fail(f"{self._label.format(key=key)} lists a name twice: {items}")
        return items
