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
The UR5's task plug-ins: ``reach``, ``push`` and ``pick_and_place``.

A plug-in (:class:`~async_rl_ros.core.tasks.Task`) ties a task's rules to the env that plays
them: its spec and checks come from the rules (:mod:`.reach_task`, :mod:`.manipulation_task`),
its ``make_env`` builds the env (:mod:`.reach_env`, :mod:`.manipulation_env`) and its
``scripted`` returns the task's scripted controller (:mod:`.scripted`). The rules sit below the
envs, which read them; the plug-ins sit above, so no module of a task imports its own env.
:mod:`.tasks` finds these plug-ins by name.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig
from async_rl_ros.core.tasks import FINAL_DISTANCE, TaskSpec
from async_rl_ros.envs.cartesian import ARM_ACT_DIMS
from async_rl_ros.envs.manipulation_env import UR5ManipulationEnv
from async_rl_ros.envs.manipulation_task import ManipulationTask
from async_rl_ros.envs.reach_env import UR5ReachEnv
from async_rl_ros.envs.reach_task import check_starts, OBS_LAYOUT, ReachGoalSpec
from async_rl_ros.envs.scripted import (ScriptedPickPolicy, ScriptedPushPolicy,
                                        ScriptedReachPolicy)
import numpy as np

__all__ = ['UR5ReachTask', 'UR5CubeTask', 'UR5PushTask', 'UR5PickAndPlaceTask']


class UR5ReachTask:
    """The ``reach`` task plug-in: the UR5 flange to a point, simulated or real."""

    name = 'reach'

    def spec(self, cfg: EnvWorkerConfig) -> TaskSpec:
        """Describe the reach task: layouts, goal spec, final distance as rank metric."""
        arm = ARM_ACT_DIMS[cfg.task.action]
        return TaskSpec(self.name, OBS_LAYOUT, (('arm', arm),), ReachGoalSpec(cfg.task),
                        FINAL_DISTANCE, real_arm=True, goal_free=('q', 'qd', 'ee_pos'))

    def check(self, cfg: EnvWorkerConfig) -> None:
        """Refuse start poses the safety limits reject (see :func:`.check_starts`)."""
        check_starts(cfg)

    def scripted(self, env: Any) -> Callable[[np.ndarray], np.ndarray]:
        """Return the resolved-rate reach controller for ``env``'s action."""
        task = env.unwrapped.cfg.task
        if task.action == 'cartesian':
            return ScriptedReachPolicy(ee_speed=task.ee_speed)
        return ScriptedReachPolicy(np.asarray(env.unwrapped.speed))

    def make_env(self, cfg: EnvWorkerConfig, *, gate: Any = None,
                 render_mode: str | None = None) -> Any:
        """Build the reach env on ``cfg.backend``; a physical arm acts behind ``gate``."""
        backend = None
        if cfg.backend == 'ur5':
            from async_rl_ros.envs.ur5_rtde import UR5RTDE  # the real arm's stack, on demand
            backend = UR5RTDE(cfg, gate=gate)
        return UR5ReachEnv(cfg, backend=backend, render_mode=render_mode)


class UR5CubeTask(ManipulationTask):
    """A plug-in of a task that moves the cube, simulated or on a physical cell."""

    #: A physical cell needs the cube's pose from outside (``make_env(object_pose=...)``).
    object_pose = True
    #: A simulated episode may start with the cube held (``sim.cube_in_gripper``).
    held_start = True

    def scripted(self, env: Any) -> Callable[[np.ndarray], np.ndarray]:
        """
        Return the scripted controller of the task (cartesian actions only).

        :raises ConfigError: ``task.action`` is ``joint``.
        """
        cfg = env.unwrapped.cfg.task
        if cfg.action != 'cartesian':
            raise ConfigError('task.action', cfg.action, 'cartesian for the scripted '
                              'controller')
        script = ScriptedPickPolicy if self.in_air else ScriptedPushPolicy
        return script(cfg.ee_speed)

    def make_env(self, cfg: EnvWorkerConfig, *, gate: Any = None,
                 render_mode: str | None = None, object_pose: Any = None) -> Any:
        """
        Build the cell for this task: simulated, or physical (``backend: ur5``).

        :param gate: the policy gate of a learning worker on a physical arm.
        :param object_pose: the :class:`~async_rl_ros.envs.object_pose.PoseBoard` the
            transport feeds with the cube's pose; a physical cell needs one.
        """
        return UR5ManipulationEnv(cfg, self, render_mode=render_mode, gate=gate,
                                  object_pose=object_pose)


class UR5PushTask(UR5CubeTask):
    """``push``: slide the cube to a target on the table."""

    name = 'push'
    in_air = False
    #: What push trains with where the configuration says nothing (``envs.tasks.task_defaults``):
    #: wider networks than reach's ``[128, 128]`` (at 25 Hz and 200,000 env steps: 86, 98, 96
    #: and 91 of 100 held-out episodes on seeds 0, 2, 1 and 3 against 70, 54, 41 and 86), and
    #: pick_and_place's 10 decisions a second: 99, 98 and 97 of 100 held out after 100,000 env
    #: steps on seeds 1, 2 and 3, the budget (docs/tasks.md). The update cap rises over the
    #: first 25,000 env steps: one arm paced to real time then reached 90 % after 54.8 arm
    #: minutes (seed 4), where at the whole cap from the first update no paced run had
    #: reached it in 75 (docs/benchmarks.md, arm time).
    parameter_defaults: ClassVar[dict] = {
        'env_worker': {'task.control_hz': 10.0},
        'learner': {'sac.hidden_sizes': [256, 256], 'total_env_steps': 100_000,
                    'max_updates_ramp_steps': 25_000}}


class UR5PickAndPlaceTask(UR5CubeTask):
    """``pick_and_place``: carry the cube to a target, ``air_fraction`` of them in the air."""

    name = 'pick_and_place'
    in_air = True
    #: Push's width (15 of 100 held out after 100,000 env steps against 6 of 100 with
    #: ``[128, 128]`` after 150,000) and the budget of the issue's goal (80 % within 500,000).
    #: 10 decisions a second (2.5 cm a step, 40 a 4 s episode, near panda-gym's 50) and half
    #: the training episodes started with the cube held: 95, 96 and 100 of 100 held-out
    #: episodes after about 150,000 env steps on seeds 0, 1 and 2, against 32 after 250,000 at
    #: 25 Hz with held starts (docs/tasks.md). Push's ramp of the update cap.
    parameter_defaults: ClassVar[dict] = {
        'env_worker': {'task.control_hz': 10.0, 'sim.cube_in_gripper': 0.5},
        'learner': {'sac.hidden_sizes': [256, 256], 'total_env_steps': 500_000,
                    'max_updates_ramp_steps': 25_000}}
