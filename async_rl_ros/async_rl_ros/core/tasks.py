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
The task contract: all that the core knows of a task, whoever wrote it.

A task plug-in (:class:`Task`) builds environments and describes them with a
:class:`TaskSpec`: the observation layout (named slices), the action layout (which slices
drive the arm, which the gripper), the :class:`GoalSpec` hindsight relabeling rewrites goals
with, and the :class:`RankMetric` that orders evaluated policies after their success rate.
The learner, hindsight relabeling, evaluation and the worker loop read only a
:class:`TaskSpec`; they never import a task. Plug-ins live in ``envs/`` (the UR5 tasks,
Gymnasium goal-conditioned environments) or in other packages, found by name through the
entry point group ``async_rl_ros.tasks`` (see :mod:`async_rl_ros.envs.tasks`).

What an environment built by :meth:`Task.make_env` promises: a Gymnasium API with ``Box``
observations of width ``obs_dim`` and actions in ``[-1, 1]^act_dim``; every step's ``info``
carries ``is_success`` (bool) and the rank metric's key.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol, runtime_checkable

import numpy as np

__all__ = ['GoalSpec', 'RankMetric', 'TaskSpec', 'Task', 'FINAL_DISTANCE', 'layout_slices']


@runtime_checkable
class GoalSpec(Protocol):
    """
    A task's goals, as hindsight relabeling and the goal-conditioned views use them.

    Picklable and pure; every method takes and returns arrays with a leading batch
    dimension ``n`` (the shape of Gymnasium's ``GoalEnv.compute_reward``).
    """

    terminate_on_success: bool
    """Whether reaching the goal ends the episode (relabeled ``terminated`` then follows it)."""

    def achieved(self, obs: np.ndarray) -> np.ndarray:
        """Return the achieved goal of each observation, shape ``(n, goal_dim)``."""

    def desired(self, obs: np.ndarray) -> np.ndarray:
        """Return the desired goal each observation carries, shape ``(n, goal_dim)``."""

    def with_goal(self, obs: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Return a copy of ``obs`` with desired goal ``goal`` (and what derives from it)."""

    def compute_reward(self, achieved: np.ndarray, desired: np.ndarray,
                       info: Mapping[str, np.ndarray]) -> np.ndarray:
        """
        Return the reward of each row, shape ``(n,)``, exactly as ``step()`` gives it.

        :param info: per-row arrays the reward may need besides the goals; relabeling passes
            ``action`` (the action that led to ``achieved``).
        """

    def is_success(self, achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        """Return whether each achieved goal counts as reaching its desired goal, ``(n,)``."""


@dataclasses.dataclass(frozen=True)
class RankMetric:
    """
    The figure that orders evaluated policies whose success rates tie.

    :param key: the ``info`` key of the last step of an episode that holds the figure.
    :param label: its name in tables and plots.
    :param unit: its unit (``''`` for none).
    :param lower_is_better: whether a smaller value ranks higher.
    """

    key: str
    label: str
    unit: str = ''
    lower_is_better: bool = True

    def score(self, value: float) -> float:
        """Return ``value`` signed so that larger is better (NaN ranks last)."""
        if value != value:  # NaN: an episode without the figure
            return float('-inf')
        return -value if self.lower_is_better else value

    @property
    def summary_key(self) -> str:
        """Return the key of its mean in ``summary.json`` (``eval_final_distance_m``)."""
        return f'eval_final_{self.key}' + (f'_{self.unit}' if self.unit else '')


#: The rank metric of goal-reaching tasks: how far the achieved goal ended from the desired.
FINAL_DISTANCE = RankMetric('distance', 'final distance', 'm', lower_is_better=True)


def layout_slices(layout: tuple[tuple[str, int], ...]) -> dict[str, slice]:
    """Return ``{name: slice}`` of a layout of ``(name, width)`` pairs laid end to end."""
    out, start = {}, 0
    for name, width in layout:
        out[name] = slice(start, start + int(width))
        start += int(width)
    return out


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """
    What the core knows of a task (a typed record; picklable, crosses process boundaries).

    :param name: the task's name as the config and the CLI give it (``reach``,
        ``gym:PandaPush-v3``, a registered third-party name).
    :param obs_layout: the observation, as ``(name, width)`` pairs in order.
    :param act_layout: the action, likewise; ``arm`` drives the arm, ``gripper`` the gripper.
    :param goal: the goal spec for hindsight relabeling; ``None`` for a task without goals.
    :param rank: the metric that orders evaluated policies after the success rate.
    :param real_arm: whether the task may run on a physical arm (behind the safety filter).
    :param safety_filter: whether every command passes the safety filter; ``None``: as
        ``real_arm`` (a simulated UR5 task filters its commands too, a Gymnasium env does not).
    :param goal_free: observation entries that do not depend on the desired goal (the
        ``observation`` part of the goal-conditioned dict view).
    """

    name: str
    obs_layout: tuple[tuple[str, int], ...]
    act_layout: tuple[tuple[str, int], ...]
    goal: GoalSpec | None
    rank: RankMetric = FINAL_DISTANCE
    real_arm: bool = False
    safety_filter: bool | None = None
    goal_free: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.safety_filter is None:
            object.__setattr__(self, 'safety_filter', bool(self.real_arm))
        for what, layout in (('obs_layout', self.obs_layout), ('act_layout', self.act_layout)):
            names = [name for name, _ in layout]
            if not layout or len(set(names)) != len(names):
                raise ValueError(f'task {self.name!r}: {what} needs unique, non-empty names')
            if any(int(width) < 1 for _, width in layout):
                raise ValueError(f'task {self.name!r}: {what} widths must be >= 1: {layout}')
        unknown = set(self.goal_free) - set(self.obs_slices)
        if unknown:
            raise ValueError(f'task {self.name!r}: goal_free names {sorted(unknown)} are not '
                             f'in obs_layout')
        if self.goal is not None and not isinstance(self.goal, GoalSpec):
            raise TypeError(f'task {self.name!r}: {self.goal!r} lacks part of GoalSpec')

    @property
    def obs_dim(self) -> int:
        """Return the observation width."""
        return sum(int(w) for _, w in self.obs_layout)

    @property
    def act_dim(self) -> int:
        """Return the action width."""
        return sum(int(w) for _, w in self.act_layout)

    @property
    def obs_slices(self) -> dict[str, slice]:
        """Return the named slices of the observation."""
        return layout_slices(self.obs_layout)

    @property
    def act_slices(self) -> dict[str, slice]:
        """Return the named slices of the action."""
        return layout_slices(self.act_layout)

    def describe(self) -> dict[str, Any]:
        """Return the spec's facts for ``summary.json`` and the run table (every driver's)."""
        facts = {'task': self.name, 'obs_dim': self.obs_dim, 'act_dim': self.act_dim,
                 'obs_layout': {n: int(w) for n, w in self.obs_layout},
                 'act_layout': {n: int(w) for n, w in self.act_layout},
                 'hindsight_relabeling': self.goal is not None,
                 'safety_filter': self.safety_filter}
        if not self.real_arm:
            facts['note'] = 'simulation only: this task never runs on a physical arm' + (
                '' if self.safety_filter else ' and has no safety filter')
        return facts


@runtime_checkable
class Task(Protocol):
    """
    A task plug-in: builds the environments of one task and describes them.

    Register one under the entry point group ``async_rl_ros.tasks`` (the entry point names
    the task and loads a class or a function that returns the plug-in when called with no
    arguments); choose it with ``env_worker.task.name``, ``async-rl-train --task NAME`` or
    ``task:=NAME`` in the launch file.
    """

    name: str

    def spec(self, cfg: Any) -> TaskSpec:
        """Return the task's spec under the ``env_worker`` section ``cfg``."""

    def check(self, cfg: Any) -> None:
        """Refuse (``ConfigError``) a configuration this task cannot run, before anything runs."""

    def make_env(self, cfg: Any, *, gate: Any = None, render_mode: str | None = None) -> Any:
        """
        Build (connect) one environment of the task (see the module docstring).

        :param cfg: the ``env_worker`` section.
        :param gate: a physical arm's policy gate (``None``: every command passes).
        :param render_mode: Gymnasium's render mode.

        A task whose class sets ``object_pose = True`` moves an object that a physical cell
        sees from outside (a camera): its ``make_env`` also takes ``object_pose``, the board
        its transport feeds with that object's pose (``None`` in simulation).

        A task whose class sets ``held_start = True`` can start a simulated episode with its
        object held (``reset`` option ``held``, drawn with ``sim.cube_in_gripper``); any
        other task is refused a non-zero share.

        A task may also set ``parameter_defaults``, node section (``env_worker`` or
        ``learner``) -> dotted key -> value (``{'learner': {'sac.hidden_sizes': [256, 256]}}``):
        what it trains with where the parameter file and the command line say nothing.
        """
