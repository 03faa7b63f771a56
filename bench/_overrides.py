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
The benches' ``--set``: a setting other than the shipped one, as ``async-rl-train --set`` takes it.

A bench that fixes some keys itself (its seeds, its budget, the mode it measures) refuses a
``--set`` of one of them in one line, rather than quietly overriding it; every other key goes
to its node as in the trainer, and the bench names what was set beside its figure (a figure
with a ``--set`` is not a figure of the shipped defaults). A module of the benches, not a
bench (its name starts with ``_``).
"""

from __future__ import annotations

import argparse
from typing import Any, Mapping

__all__ = ['add_argument', 'by_node', 'flat']


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add the repeatable ``--set KEY=VALUE`` (stored in ``overrides``)."""
    parser.add_argument('--set', dest='overrides', action='append', default=[],
                        metavar='KEY=VALUE', help='one setting other than the shipped one, as '
                        'async-rl-train --set takes it (repeatable), e.g. --set '
                        'learner.max_updates_ramp_steps=10000')


def by_node(items: list[str], fixed: Mapping[str, tuple[str, ...]],
            flags: str) -> dict[str, dict[str, Any]]:
    """
    Return the ``--set`` settings routed to their node (``env_worker``, ``learner``, ...).

    :param fixed: the keys the bench sets itself, by node.
    :param flags: the bench's own flags that set them, named in the refusal.
    :raises ConfigError: a malformed ``--set``, an unknown node, or a key of ``fixed``.
    """
    from async_rl_ros.core.config import ConfigError
    from async_rl_ros.local.cli import parse_overrides, split_overrides

    nodes = split_overrides(parse_overrides(items))
    for node, keys in fixed.items():
        for key in keys:
            if key in nodes[node]:
                raise ConfigError('--set', f'{node}.{key}', f'a key the bench does not set '
                                  f'itself: {flags} set the rest')
    return nodes


def flat(nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Return ``{'learner.sac.gamma': 0.98, ...}``: the settings as ``--set`` named them."""
    return {f'{node}.{key}': value for node, values in nodes.items()
            for key, value in values.items()}
