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
Find a task plug-in by name: the built-in UR5 tasks, Gymnasium ids, third-party packages.

Names (``env_worker.task.name``, ``async-rl-train --task``, ``task:=`` in the launch file):

* ``reach`` -- the UR5 reach task, simulated or real;
* ``push`` and ``pick_and_place`` -- the UR5 with a gripper moves a cube, simulated or on a
  physical cell under ROS 2 (these three: :mod:`async_rl_ros.envs.ur5_tasks`);
* ``gym:ID`` -- any Gymnasium goal-conditioned environment (``gym:PandaPush-v3``), simulated
  only (:mod:`async_rl_ros.envs.gym_task`); ``gym:MODULE:ID`` imports ``MODULE`` first, as
  ``gymnasium.make`` does;
* a name registered under the entry point group :data:`ENTRY_POINT_GROUP` by another
  package: its entry point loads a class or function that returns a
  :class:`~async_rl_ros.core.tasks.Task` when called without arguments.

:func:`resolve_task` also runs the plug-in's own configuration checks (those that need
kinematics or the simulator live with the task, not in the core's config sections).
:func:`load_sections` loads a run's configuration over the task's own defaults (a plug-in's
``parameter_defaults``: push trains wider networks than reach, for longer, at 10 Hz).
"""

from __future__ import annotations

import copy
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from async_rl_ros.core.config import (ConfigError, EnvWorkerConfig, load_node_config,
                                      NODE_SECTIONS)
from async_rl_ros.core.options import Section
from async_rl_ros.core.tasks import Task, TaskSpec
from async_rl_ros.envs.display import check_gui

__all__ = ['ENTRY_POINT_GROUP', 'GYM_PREFIX', 'BUILTIN_TASKS', 'TASK_SECTIONS', 'get_task',
           'load_sections', 'resolve_task', 'task_defaults', 'task_names']

#: Entry point group third-party packages register their tasks under.
ENTRY_POINT_GROUP = 'async_rl_ros.tasks'
#: The node sections a task's ``parameter_defaults`` may set (:func:`task_defaults`).
TASK_SECTIONS = ('env_worker', 'learner')
#: Prefix of a Gymnasium id used as a task.
GYM_PREFIX = 'gym:'


def _reach() -> Task:
    from async_rl_ros.envs.ur5_tasks import UR5ReachTask
    return UR5ReachTask()


def _push() -> Task:
    from async_rl_ros.envs.ur5_tasks import UR5PushTask
    return UR5PushTask()


def _pick_and_place() -> Task:
    from async_rl_ros.envs.ur5_tasks import UR5PickAndPlaceTask
    return UR5PickAndPlaceTask()


#: The tasks this package ships, by name.
BUILTIN_TASKS: dict[str, Callable[[], Task]] = {'reach': _reach, 'push': _push,
                                                'pick_and_place': _pick_and_place}


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def task_names() -> list[str]:
    """Return the names of every task found (built-in and registered), plus ``gym:ID``."""
    names = dict.fromkeys(BUILTIN_TASKS)
    names.update(dict.fromkeys(sorted(_entry_points())))
    return [*names, GYM_PREFIX + 'ID']


def get_task(name: str) -> Task:
    """
    Return the plug-in of task ``name``.

    :raises ConfigError: no task of that name, or its entry point fails to load.
    """
    if name.startswith(GYM_PREFIX):
        from async_rl_ros.envs.gym_task import GymGoalTask
        return GymGoalTask(name[len(GYM_PREFIX):])
    factory: Any = BUILTIN_TASKS.get(name)
    if factory is None:
        ep = _entry_points().get(name)
        if ep is None:
            raise ConfigError('task.name', name, 'one of ' + ', '.join(task_names()))
        try:
            factory = ep.load()
        except Exception as exc:  # noqa: B902 -- a broken third-party package: one line
            raise ConfigError('task.name', name, f'its entry point {ep.value} failed to '
                              f'load: {type(exc).__name__}: {exc}') from None
    task = factory()
    if not isinstance(task, Task):
        raise ConfigError('task.name', name, f'{factory!r} returned {task!r}, which lacks '
                          f'part of the Task contract (name, spec, check, make_env)')
    return task


def resolve_task(cfg: EnvWorkerConfig) -> tuple[Task, TaskSpec]:
    """
    Return the plug-in and spec of ``cfg.task.name``, with the plug-in's checks passed.

    :raises ConfigError: an unknown task, or a configuration the task refuses.
    """
    task = get_task(cfg.task.name)
    if cfg.backend == 'sim':
        check_gui(cfg.sim.gui)  # here, before any process opens a window and hangs
    held = cfg.sim.cube_in_gripper
    if held and not getattr(task, 'held_start', False):
        raise ConfigError('sim.cube_in_gripper', held, f'0 for task {task.name!r}: only a task '
                          'that can start with its object held takes it (push, pick_and_place)')
    task.check(cfg)
    return task, task.spec(cfg)


def task_defaults(name: str) -> dict[str, dict[str, Any]]:
    """
    Return what task ``name`` trains with where the configuration says nothing.

    A plug-in may set ``parameter_defaults``: node section -> dotted key -> value, e.g.
    ``{'learner': {'sac.hidden_sizes': [256, 256]}}``. They go under the parameter file and the
    command line (:func:`load_sections`): any value set there wins. Only the sections
    :data:`TASK_SECTIONS` (how the arm acts, how the learner learns): every node that reads
    them knows the task, so a node started by hand applies them too
    (``ros/params.py``); transport and runner options belong to the machine.

    :raises ConfigError: an unknown task, or a default no node reads or out of its range.
    """
    raw = getattr(get_task(name), 'parameter_defaults', None) or {}
    source = f'parameter_defaults of task {name!r}'
    out: dict[str, dict[str, Any]] = {}
    for node, values in raw.items():
        if node not in TASK_SECTIONS:
            raise ConfigError('<node section>', node, 'one of ' + ', '.join(TASK_SECTIONS),
                              source)
        cls = NODE_SECTIONS[node]
        cls.from_flat(values, source=source, prefix=f'{node}.')  # every key and value checked
        out[node] = copy.deepcopy(dict(values))
    return out


def load_sections(path: str | Path | None, overrides: Mapping[str, Mapping[str, Any]],
                  nodes: Sequence[str]) -> dict[str, Section]:
    """
    Load the ``nodes`` sections of a run: the task's defaults, the file, then ``overrides``.

    The task is the ``env_worker`` section's ``task.name`` (file and overrides).

    :param path: the ``ros__parameters`` file (``None``: no file).
    :param overrides: node -> dotted key -> value, e.g. from ``--set`` and ``--task``.
    :param nodes: the node sections to load, e.g. ``('env_worker', 'learner')``.
    """
    name = load_node_config(path, 'env_worker', EnvWorkerConfig,
                            overrides.get('env_worker')).task.name
    defaults = task_defaults(name)
    return {node: load_node_config(path, node, NODE_SECTIONS[node], overrides.get(node),
                                   defaults=defaults.get(node)) for node in nodes}
