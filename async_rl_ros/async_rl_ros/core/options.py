# Copyright 2026 The async_rl_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
The configuration framework: options with metadata and the sections made of them.

A section is a dataclass whose fields are declared with :func:`option`, which records a
description, a unit and the allowed range or choices in the field's metadata. From that one
declaration come:

* ``validate()`` -- range, type and choice checks with errors that name the key;
* the ROS 2 parameter declarations of the nodes (description, ranges, read-only flags);
* the ``ros__parameters`` YAML files (:mod:`async_rl_ros.core.param_file`), which the local
  runner reads too, so ROS and non-ROS runs read the very same files in ``config/``.

Sections nest: a field whose type is another section becomes a dotted prefix
(``task.control_hz``), which is also how ROS 2 flattens nested YAML parameters. The sections
themselves are declared in :mod:`async_rl_ros.core.sections` and imported from
:mod:`async_rl_ros.core.config`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from typing import Any, Iterator, Mapping

__all__ = ['ConfigError', 'OptionInfo', 'option', 'Section', 'check_box', 'INT32_MAX']

INT32_MAX = 2**31 - 1


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range."""

    def __init__(self, key: str, value: Any, allowed: str, source: str | None = None):
        self.key = key
        self.value = value
        self.allowed = allowed
        self.source = source
        where = f'{source}: ' if source else ''
        super().__init__(f'{where}{key} = {value!r} is not allowed ({allowed})')

    def __reduce__(self):
        # Raised in a worker or pool process, it travels back whole (pickle would otherwise
        # call __init__ with the message alone).
        return type(self), (self.key, self.value, self.allowed, self.source)


@dataclasses.dataclass(frozen=True)
class OptionInfo:
    """What :func:`option` records about one field (read by validators and the ROS layer)."""

    doc: str
    unit: str = ''
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[Any, ...] | None = None
    length: int | None = None
    read_only: bool = False
    #: ``(test, words)``: a value passes when ``test(value)`` is true; ``words`` say which do
    rule: tuple[typing.Callable[[Any], bool], str] | None = None

    def allowed(self) -> str:
        """Describe the allowed values in words, for error messages and parameter docs."""
        parts = []
        if self.choices is not None:
            parts.append('one of ' + ', '.join(repr(c) for c in self.choices))
        if self.low is not None:
            parts.append(('> ' if self.low_open else '>= ') + _number(self.low))
        if self.high is not None:
            parts.append('<= ' + _number(self.high))
        if self.length is not None:
            parts.append(f'exactly {self.length} numbers')
        if self.rule is not None:
            parts.append(self.rule[1])
        return ' and '.join(parts) if parts else 'any value of the declared type'


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f'{x:g}'


def option(default: Any, doc: str, *, unit: str = '', low: float | None = None,
           high: float | None = None, low_open: bool = False,
           choices: typing.Sequence[Any] | None = None, length: int | None = None,
           read_only: bool = False,
           rule: tuple[typing.Callable[[Any], bool], str] | None = None) -> Any:
    """
    Declare a configuration field.

    :param default: default value (lists are copied per instance).
    :param doc: one-sentence description; it becomes the ROS parameter description.
    :param unit: physical unit shown in docs (``rad``, ``m/s``, ``Hz`` ...).
    :param low: smallest allowed value (inclusive unless ``low_open``), per element for lists.
    :param high: largest allowed value (inclusive), per element for lists.
    :param low_open: make ``low`` exclusive (for quantities that must be strictly positive).
    :param choices: the closed set of allowed values.
    :param length: required length of a list value.
    :param read_only: structural setting that cannot change once a node runs.
    :param rule: ``(test, words)`` for values no range or set describes (an address): a value
        is allowed when ``test(value)`` is true, and ``words`` say what is allowed.
    """
    info = OptionInfo(doc=doc, unit=unit, low=low, high=high, low_open=low_open,
                      choices=tuple(choices) if choices is not None else None,
                      length=length, read_only=read_only, rule=rule)
    if isinstance(default, list):
        frozen = list(default)
        return dataclasses.field(default_factory=lambda: list(frozen),
                                 metadata={'option': info})
    return dataclasses.field(default=default, metadata={'option': info})


def _is_section_type(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Section)


def _unknown_key_hint(key: str, known: set[str], prefix: str) -> str:
    """
    Suggest the closest key of the same group first, else list that group; then any key.

    ``sac.learning_rate`` names a group that exists: the answer comes from ``sac.*`` (its
    keys, as no name there is close), never from a close name elsewhere such as
    ``learning_starts``.
    """
    group = key.rsplit('.', 1)[0] + '.' if '.' in key else ''
    if group:
        names = sorted(k[len(group):] for k in known if k.startswith(group))
        if names:
            close = difflib.get_close_matches(key[len(group):], names, n=1)
            if close:
                return f'did you mean {prefix + group + close[0]!r}?'
            return f'keys under {prefix + group!r}: ' + ', '.join(names)
    close = difflib.get_close_matches(key, sorted(known), n=1)
    if close:
        return f'did you mean {prefix + close[0]!r}?'
    tops = sorted({k.split('.', 1)[0] + ('.*' if '.' in k else '') for k in known})
    return f'keys here: {", ".join(tops)} (every key: docs/parameters.md)'


class Section:
    """Base class of every configuration dataclass."""

    #: Options that moved: old dotted key (below this section) -> where it lives now. A
    #: configuration that still uses an old key is refused with the new one named.
    moved: typing.ClassVar[dict[str, str]] = {}

    # ------------------------------------------------------------------ introspection
    @classmethod
    def _fields(cls) -> dict[str, tuple[dataclasses.Field, Any]]:
        hints = typing.get_type_hints(cls)
        return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}

    @classmethod
    def options(cls, prefix: str = '') -> Iterator[tuple[str, Any, OptionInfo, Any]]:
        """Yield ``(dotted_name, type, info, default)`` for every leaf option, depth first."""
        for name, (f, tp) in cls._fields().items():
            if _is_section_type(tp):
                yield from tp.options(prefix + name + '.')
                continue
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            yield prefix + name, tp, f.metadata['option'], default

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_flat(cls, values: Mapping[str, Any], source: str | None = None,
                  prefix: str = '') -> 'Section':
        """
        Build a section from dotted keys, check it and return it.

        Unknown keys raise :class:`ConfigError` naming the closest known key.
        """
        known = {name for name, *_ in cls.options()}
        for key in values:
            if key in cls.moved:
                raise ConfigError(prefix + key, values[key],
                                  f'the option moved: set {prefix + cls.moved[key]!r} instead',
                                  source)
            if key not in known:
                raise ConfigError(prefix + key, values[key],
                                  'unknown key; ' + _unknown_key_hint(key, known, prefix),
                                  source)
        obj = cls._build(values, source, prefix)
        obj.validate(source=source, prefix=prefix)
        return obj

    @classmethod
    def _build(cls, values: Mapping[str, Any], source: str | None, prefix: str) -> 'Section':
        kwargs = {}
        for name, (f, tp) in cls._fields().items():
            if _is_section_type(tp):
                sub = {k[len(name) + 1:]: v for k, v in values.items()
                       if k.startswith(name + '.')}
                kwargs[name] = tp._build(sub, source, prefix + name + '.')
            elif name in values:
                kwargs[name] = _coerce(values[name], tp, prefix + name, source)
        return cls(**kwargs)  # type: ignore[call-arg]

    def to_flat(self, prefix: str = '') -> dict[str, Any]:
        """Return every leaf option as ``{dotted_name: value}``."""
        out: dict[str, Any] = {}
        for name, (_, tp) in self._fields().items():
            value = getattr(self, name)
            if _is_section_type(tp):
                out.update(value.to_flat(prefix + name + '.'))
            else:
                out[prefix + name] = list(value) if isinstance(value, (list, tuple)) else value
        return out

    def replace(self, **flat: Any) -> 'Section':
        """Return a validated copy with some dotted keys changed."""
        merged = self.to_flat()
        merged.update(flat)
        return type(self).from_flat(merged)

    # ------------------------------------------------------------------ validation
    def validate(self, source: str | None = None, prefix: str = '') -> None:
        """Check every option against its declared range, then the section's own rules."""
        for name, (f, tp) in self._fields().items():
            value = getattr(self, name)
            if _is_section_type(tp):
                value.validate(source, prefix + name + '.')
                continue
            info: OptionInfo = f.metadata['option']
            key = prefix + name
            _coerce(value, tp, key, source)
            items = value if isinstance(value, (list, tuple)) else [value]
            if info.length is not None and len(items) != info.length:
                raise ConfigError(key, value, info.allowed(), source)
            for item in items:
                if info.choices is not None and item not in info.choices:
                    raise ConfigError(key, value, info.allowed(), source)
                if info.rule is not None and not info.rule[0](item):
                    raise ConfigError(key, value, info.allowed(), source)
                if isinstance(item, (int, float)) and not isinstance(item, bool):
                    bad_low = info.low is not None and (
                        item <= info.low if info.low_open else item < info.low)
                    bad_high = info.high is not None and item > info.high
                    if not math.isfinite(item) or bad_low or bad_high:
                        raise ConfigError(key, value, info.allowed(), source)
        self.check(source, prefix)

    def check(self, source: str | None, prefix: str) -> None:
        """Cross-field rules of a section; override and raise :class:`ConfigError`."""


def _coerce(value: Any, tp: Any, key: str, source: str | None) -> Any:
    """Convert a YAML/ROS value to the declared type or raise a :class:`ConfigError`."""
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        item = (typing.get_args(tp) or (float,))[0]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(key, value, 'a list of integers' if item is int
                              else 'a list of numbers', source)
        if item is int:  # a whole float (a ROS double array, 64.0) is that integer
            value = [int(v) if isinstance(v, float) and v.is_integer() else v for v in value]
        return [_coerce(v, item, key, source) for v in value]
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, value, 'true or false', source)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, value, 'an integer', source)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, value, 'a number', source)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(key, value, 'a string', source)
        return value
    raise TypeError(f'unsupported option type {tp!r} for {key}')


def check_box(low: list[float], high: list[float], key: str, source: str | None) -> None:
    for axis, lo, hi in zip('xyz', low, high):
        if lo >= hi:
            raise ConfigError(f'{key}_low[{axis}]', lo, f'< {key}_high[{axis}] = {hi}', source)
