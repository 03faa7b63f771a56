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
ROS 2 parameters declared from the configuration dataclasses of ``core/config.py``.

Every leaf option of a :class:`~async_rl_ros.core.config.Section` becomes a parameter with a
``ParameterDescriptor``: the option's description (with unit and allowed values), its range
as ``FloatingPointRange`` / ``IntegerRange`` and ``read_only`` for structural options. A
runtime change (``ros2 param set``) is checked by the section's own ``validate()`` with the
change applied; an invalid one is refused with the :class:`ConfigError` message as reason.
Accepted changes are written into the live section object, so the core objects that read
their configuration at run time see them, and then passed to ``on_change(section,
changed_keys)``: the hook of the objects that copy limits and must be told (the env worker
registers the environment's ``apply_config``, e.g.
:meth:`~async_rl_ros.envs.reach_env.UR5ReachEnv.apply_config`, which tightens
limits at once and applies the rest at the next episode). Options that cannot change while
a node runs are declared ``read_only`` and refused by ROS.

A section's declared defaults are the dataclass's, or the task's where it has its own
(:func:`declare_task`, :func:`~async_rl_ros.envs.tasks.task_defaults`): a node started by hand
with ``--params-file`` trains what the launch file would have given it (``task.name: push``:
``[256, 256]`` networks); a value in the file still wins.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any, Callable, Mapping

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, OptionInfo, Section
from async_rl_ros.envs.tasks import task_defaults
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                ParameterType, SetParametersResult)

__all__ = ['SectionParameters', 'declare_task', 'descriptor_for', 'within']

_INT64 = (-2**63, 2**63 - 1)
_DOUBLE_MAX = sys.float_info.max


def _ros_type(tp: Any) -> int:
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        (item,) = set(typing.get_args(tp)) - {Ellipsis}
        return (ParameterType.PARAMETER_INTEGER_ARRAY if item is int
                else ParameterType.PARAMETER_DOUBLE_ARRAY)
    return {bool: ParameterType.PARAMETER_BOOL, int: ParameterType.PARAMETER_INTEGER,
            float: ParameterType.PARAMETER_DOUBLE, str: ParameterType.PARAMETER_STRING}[tp]


def descriptor_for(name: str, tp: Any, info: OptionInfo) -> ParameterDescriptor:
    """
    Build the descriptor of one option.

    :param name: the parameter name (dotted).
    :param tp: the option's type annotation.
    :param info: what :func:`~async_rl_ros.core.config.option` recorded.
    :returns: description with unit and allowed values, range, read-only flag and type.
    """
    ros_type = _ros_type(tp)
    unit = f' [{info.unit}]' if info.unit else ''
    descriptor = ParameterDescriptor(name=name, type=ros_type, description=info.doc + unit,
                                     additional_constraints=info.allowed(),
                                     read_only=info.read_only)
    if info.low is None and info.high is None:
        return descriptor
    if ros_type == ParameterType.PARAMETER_INTEGER:
        low = _INT64[0] if info.low is None else int(info.low) + int(info.low_open)
        high = _INT64[1] if info.high is None else int(info.high)
        descriptor.integer_range = [IntegerRange(from_value=max(low, _INT64[0]),
                                                 to_value=min(high, _INT64[1]), step=1)]
    elif ros_type == ParameterType.PARAMETER_DOUBLE:
        # An open lower bound is left to validate(): the range is closed.
        low = -_DOUBLE_MAX if info.low is None else float(info.low)
        high = _DOUBLE_MAX if info.high is None else float(info.high)
        descriptor.floating_point_range = [FloatingPointRange(from_value=low, to_value=high,
                                                              step=0.0)]
    return descriptor


class SectionParameters:
    """
    One configuration section as parameters of a node.

    :param node: the node (``rclpy.node.Node`` or a lifecycle node).
    :param cls: the :class:`Section` subclass.
    :param prefix: parameter-name prefix, e.g. ``'transport.'`` ('' for top level).
    :param on_change: called as ``on_change(section, changed_keys)`` after an accepted
        runtime change, with the live section and the dotted keys (without ``prefix``) whose
        value changed; it runs in the parameter callback, so it must return quickly.
    :param frozen: declare every parameter of the section read-only, for a node that reads
        the section only when it starts (e.g. ``transport.*`` on an env worker).
    :param check: more checks of a whole section beyond its ``validate()``, raising
        :class:`ConfigError` (the env worker's: its task plug-in's, which need kinematics);
        run on the start parameters and on every change before it is accepted.
    :param defaults: dotted key (without ``prefix``) -> the value declared as the default in
        place of the dataclass's (the task's own defaults, from :func:`declare_task`).
    :raises ConfigError: the parameters the node was started with are invalid.

    A parameter of the section the node declared before (``task.name``, by
    :func:`declare_task`) is read, not declared again.
    """

    def __init__(self, node: Any, cls: type[Section], prefix: str = '',
                 on_change: Callable[[Section, tuple[str, ...]], Any] | None = None,
                 frozen: bool = False, check: Callable[[Section], Any] | None = None,
                 defaults: Mapping[str, Any] | None = None):
        self.node, self.cls, self.prefix = node, cls, prefix
        self.on_change, self.check = on_change, check
        declared, names = [], []
        for name, tp, info, default in cls.options():
            full = prefix + name
            names.append(full)
            if node.has_parameter(full):
                continue
            default = (defaults or {}).get(name, default)
            value = list(default) if isinstance(default, (list, tuple)) else default
            if frozen:
                info = dataclasses.replace(info, read_only=True)
            declared.append((full, value, descriptor_for(full, tp, info)))
        node.declare_parameters('', declared)
        values = {name[len(prefix):]: node.get_parameter(name).value for name in names}
        #: The validated, live section.
        self.section = cls.from_flat({k: _plain(v) for k, v in values.items()},
                                     source=f'{node.get_name()} parameters')
        if check is not None:
            check(self.section)
        node.add_on_set_parameters_callback(self._on_set)

    def _on_set(self, params: list[Any]) -> SetParametersResult:
        mine = {p.name[len(self.prefix):]: _plain(p.value) for p in params
                if p.name.startswith(self.prefix)
                and p.name[len(self.prefix):] in self.section.to_flat()}
        if not mine:
            return SetParametersResult(successful=True)
        before = self.section.to_flat()
        try:
            updated = self.section.replace(**mine)
            if self.check is not None:
                self.check(updated)
        except ConfigError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        after = updated.to_flat()
        changed = tuple(key for key in mine if after[key] != before[key])
        _assign(self.section, updated)
        if self.on_change is not None and changed:
            self.on_change(self.section, changed)
        return SetParametersResult(successful=True)


def declare_task(node: Any) -> dict[str, dict[str, Any]]:
    """
    Declare the ``task.name`` parameter first and return what that task trains with.

    The ``env_worker`` section's option, declared as :class:`SectionParameters` declares it
    (which then reads it); the nodes declare their sections with the returned defaults.

    :returns: node section (``env_worker``, ``learner``) -> dotted key -> the task's default.
    :raises ConfigError: an unknown task.
    """
    ((name, tp, info, default),) = (option for option in EnvWorkerConfig.options()
                                    if option[0] == 'task.name')
    value = node.declare_parameter(name, default, descriptor_for(name, tp, info)).value
    return task_defaults(value)


def within(defaults: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Return the keys of ``defaults`` under ``prefix`` (``'task.'``), without it."""
    return {key[len(prefix):]: value for key, value in defaults.items()
            if key.startswith(prefix)}


def _plain(value: Any) -> Any:
    """Turn a parameter value (array.array for arrays in rclpy) into plain Python."""
    if hasattr(value, 'tolist'):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    return value


def _assign(target: Section, source: Section) -> None:
    """Copy every field of ``source`` into ``target`` in place (nested sections too)."""
    for name in type(target).__dataclass_fields__:
        value = getattr(source, name)
        if isinstance(value, Section):
            _assign(getattr(target, name), value)
        else:
            setattr(target, name, value)
