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
The ``ros__parameters`` YAML files: read into sections, written back, documented.

One file layout serves both ways of running: ``node_name: {ros__parameters: {...}}``, which
``ros2 run ... --params-file`` and the launch files take, and which the local runner reads
through :func:`load_node_config` (a ``/**`` section applies to every node that knows its
keys). A run writes the configuration it trains with in the same layout
(:func:`dump_yaml_parameters`; a ROS 2 node's own parameters: :func:`dump_node_parameters`),
and :func:`parameters_markdown` renders the parameter reference from the sections
(:mod:`async_rl_ros.core.options`).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from async_rl_ros.core.options import ConfigError, Section
import yaml

__all__ = ['load_yaml_parameters', 'dump_yaml_parameters', 'dump_node_parameters',
           'load_node_config', 'parameters_markdown']

_WILDCARD = '/**'


def _flatten(tree: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f'{prefix}{key}'
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + '.'))
        else:
            out[name] = value
    return out


def load_yaml_parameters(path: str | Path, known_nodes: Iterable[str] | None = None
                         ) -> dict[str, dict[str, Any]]:
    """
    Read a ROS 2 parameter file into ``{node_name: {dotted_key: value}}``.

    The file must have the ``node_name: {ros__parameters: {...}}`` layout that
    ``ros2 run ... --params-file`` accepts; nested mappings are flattened with dots.

    :param path: the file.
    :param known_nodes: the node names the file may hold (``/**`` is always allowed); a
        misspelled section (``lerner:``) would otherwise leave its node on defaults unnoticed.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding='utf-8')
    except OSError as exc:
        raise ConfigError('config', source, f'a readable file ({exc.strerror})') from None
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start]
        raise ConfigError('config', source, f'a UTF-8 text file (byte 0x{bad:02x} at offset '
                          f'{exc.start} is not UTF-8)') from None
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError('config', source,
                          'valid YAML (' + ' '.join(str(exc).split()) + ')') from None
    if tree is None:
        raise ConfigError('config', source, 'a file with node_name: {ros__parameters: ...} '
                          'entries; this one holds none (leave --config out for the defaults)')
    if not isinstance(tree, Mapping):
        raise ConfigError('<top level>', type(tree).__name__,
                          'a mapping of node names to {ros__parameters: ...}', source)
    nodes: dict[str, dict[str, Any]] = {}
    for node, body in tree.items():
        if not isinstance(body, Mapping) or set(body) != {'ros__parameters'}:
            raise ConfigError(str(node), body, 'a mapping with the single key ros__parameters',
                              source)
        params = body['ros__parameters'] or {}
        if not isinstance(params, Mapping):
            raise ConfigError(f'{node}.ros__parameters', params, 'a mapping of parameters',
                              source)
        name = str(node).lstrip('/')
        if known_nodes is not None:
            _check_node_name(name, known_nodes, source)
        nodes[name] = _flatten(params)
    return nodes


def dump_yaml_parameters(sections: Mapping[str, Section]) -> str:
    """
    Write sections as the ROS 2 parameter file :func:`load_yaml_parameters` reads back.

    Every option is written, nested by its dotted name (``ros2 run ... --params-file`` takes
    the file too), so loading it gives the same sections whatever the defaults are then.

    :param sections: node name -> its section, e.g. ``{'learner': LearnerConfig()}``.
    """
    return dump_node_parameters({node: section.to_flat() for node, section in sections.items()})


def dump_node_parameters(nodes: Mapping[str, Mapping[str, Any]]) -> str:
    """
    Write flat parameters (``sac.gamma: 0.98``) per node as a ROS 2 parameter file.

    :param nodes: node name -> its parameters by dotted name; sequences are written as lists.
    """
    tree: dict[str, Any] = {}
    for node, flat in nodes.items():
        params: dict[str, Any] = {}
        for key, value in flat.items():
            *parents, leaf = key.split('.')
            branch = params
            for name in parents:
                branch = branch.setdefault(name, {})
            is_list = isinstance(value, Sequence) and not isinstance(value, (str, bytes))
            branch[leaf] = list(value) if is_list else value  # tuples, rclpy's array.array
        tree[node] = {'ros__parameters': params}
    return yaml.safe_dump(tree, sort_keys=False, default_flow_style=None)


def _check_node_name(name: str, known_nodes: Iterable[str], source: str) -> None:
    """Refuse a node section nobody reads, suggesting the closest node name."""
    allowed = sorted(known_nodes)
    if name in allowed or name == _WILDCARD.lstrip('/'):
        return
    close = difflib.get_close_matches(name, allowed, n=1)
    hint = f'did you mean {close[0]!r}? ' if close else ''
    raise ConfigError('<node section>', name, f'{hint}node sections: {", ".join(allowed)}, '
                      f'{_WILDCARD!r}', source)


def load_node_config(path: str | Path | None, node: str, cls: type[Section],
                     overrides: Mapping[str, Any] | None = None,
                     known_nodes: Iterable[str] | None = None,
                     defaults: Mapping[str, Any] | None = None) -> Section:
    """
    Load the section of ``node`` from a parameter file, merged over ``/**`` defaults.

    From the bottom up: the dataclass defaults, ``defaults``, the file's ``/**`` section, the
    file's ``node`` section, ``overrides``.

    :param path: a ``ros__parameters`` YAML file, or ``None`` for the defaults.
    :param node: node name whose ``ros__parameters`` apply (e.g. ``env_worker``).
    :param cls: the :class:`Section` subclass to build.
    :param overrides: dotted keys that win over the file (command-line settings).
    :param known_nodes: every node name the file may hold (see :func:`load_yaml_parameters`).
    :param defaults: dotted keys the file and ``overrides`` win over (a task's own settings).
    """
    values: dict[str, Any] = dict(defaults or {})
    source = str(path) if path is not None else None
    if path is not None:
        nodes = load_yaml_parameters(path, known_nodes)
        wildcard = nodes.get(_WILDCARD.lstrip('/'), {})
        known = {name for name, *_ in cls.options()}
        # Wildcard parameters are shared by every node: keep the ones this node knows.
        values.update({k: v for k, v in wildcard.items() if k in known})
        values.update(nodes.get(node, {}))
    values.update(overrides or {})
    prefix = f'{node}.'
    try:
        return cls.from_flat(values, source=source, prefix=prefix)
    except ConfigError as exc:
        if source is None or exc.key[len(prefix):] not in (overrides or {}):
            raise
        # The value came from the command line (or a launch argument), not from the file.
        raise ConfigError(exc.key, exc.value, exc.allowed) from None


def parameters_markdown(sections: Mapping[str, type[Section]]) -> str:
    """
    Render the parameter reference (``docs/parameters.md``) from the dataclasses.

    :param sections: node name -> the :class:`Section` its ``ros__parameters`` fill.
    """
    lines = ['# Parameters', '',
             'Generated from `async_rl_ros/core/config.py` by '
             '`python -m async_rl_ros.core.config`; do not edit by hand.', '']
    for node, cls in sections.items():
        lines += [f'## `{node}`', '', (cls.__doc__ or '').strip().splitlines()[0], '',
                  '| parameter | default | unit | allowed | description |',
                  '|---|---|---|---|---|']
        for name, _, info, default in cls.options():
            flag = ' (read-only)' if info.read_only else ''
            doc = info.doc.replace('|', '\\|')  # a norm's bars would split the table cell
            lines.append(f'| `{name}` | `{default}` | {info.unit or "-"} | {info.allowed()} '
                         f'| {doc}{flag} |')
        lines.append('')
    return '\n'.join(lines)
