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
Gymnasium environment of the UR5 cube tasks (push, pick_and_place), simulated or physical.

The arm part of an action (:class:`~async_rl_ros.envs.cartesian.ArmAction`) is a velocity of
the grasp point (``task.action: cartesian``, the gripper held pointing down) or of each joint;
the joint velocities pass the same :class:`~async_rl_ros.envs.safety.SafetyFilter` as every
arm command, which here guards the fingertips too (:data:`~async_rl_ros.envs.ur5_urdf.FINGERTIP`):
the box floor keeps them above the table. The last action value sets the gripper's opening.

The cell is :class:`~async_rl_ros.envs.pybullet_scene.PyBulletCell` in simulation and
:class:`~async_rl_ros.envs.real_cell.RealCell` on a physical UR5 (``backend: ur5``), which
needs the pose board its transport feeds. As in reach, a step the real cell did not run as
commanded (a hold, a recovery) truncates the episode and says why in ``info['interrupted']``,
and run-time configuration changes go through the same
:class:`~async_rl_ros.envs.live_config.LiveConfig` (tightened limits at once, the rest at the
next reset).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, SimConfig
from async_rl_ros.envs.cartesian import ArmAction
from async_rl_ros.envs.display import check_render_mode, paced_for_watching
from async_rl_ros.envs.live_config import LiveConfig
from async_rl_ros.envs.manipulation_task import (CUBE_SIZE, ManipulationTask, OBS_DIM,
                                                 OBS_SLICES, TABLE_TOP)
from async_rl_ros.envs.object_pose import PoseBoard
from async_rl_ros.envs.reach_env import sample_start
from async_rl_ros.envs.reach_task import ReachTask
from async_rl_ros.envs.safety import SafetyFilter
from async_rl_ros.envs.ur5_kinematics import fk_position
from async_rl_ros.envs.ur5_urdf import FINGERTIP, GRASP_POINT, STROKE
import gymnasium as gym
import numpy as np
import transforms3d

__all__ = ['UR5ManipulationEnv']

_OBS_BOUND = 10.0    # |value| an observation is clipped to (positions, velocities)
_CLEARANCE = 0.005   # m: start poses keep the fingertips this far above a resting cube


def start_task(cfg: EnvWorkerConfig) -> ReachTask:
    """Return the cube tasks' start sampling: ``manipulation.home_q`` + ``task.home_noise``."""
    return ReachTask(dataclasses.replace(cfg.task, home_q=list(cfg.manipulation.home_q)))


def clears_cube(q: np.ndarray) -> bool:
    """Return whether the fingertips at ``q`` lie above a resting cube (with 5 mm to spare)."""
    return fk_position(q, FINGERTIP)[2] >= TABLE_TOP + CUBE_SIZE + _CLEARANCE


class UR5ManipulationEnv(LiveConfig, gym.Env):
    """
    Move a cube with the UR5 and its gripper, in simulation or on a physical cell.

    :param cfg: worker configuration (task, manipulation, safety, simulation sections).
    :param task: the task plug-in (push or pick_and_place).
    :param render_mode: ``None``, ``'human'`` (PyBullet GUI) or ``'rgb_array'``.
    :param gate: the policy gate of a learning worker on a physical arm.
    :param object_pose: where the cube's pose arrives on a physical arm (``backend: ur5``).
    """

    metadata = {'render_modes': ['human', 'rgb_array'], 'render_fps': 25}

    def __init__(self, cfg: EnvWorkerConfig, task: ManipulationTask,
                 render_mode: str | None = None, gate: Any = None,
                 object_pose: PoseBoard | None = None):
        super().__init__()
        if render_mode not in (None, *self.metadata['render_modes']):
            raise ConfigError('render_mode', render_mode,
                              'one of None, ' + ', '.join(self.metadata['render_modes']))
        check_render_mode(render_mode)
        cfg.validate()
        task.check(cfg)
        self.cfg = cfg = paced_for_watching(copy.deepcopy(cfg), render_mode)
        self.task = task
        self.spec_ = task.spec(cfg)
        self.goal = self.spec_.goal
        self.render_mode = render_mode
        self.metadata = dict(self.metadata, render_fps=cfg.task.control_hz)
        self.start = start_task(cfg)
        self.safety = SafetyFilter(cfg.safety, cfg.task.dt, tool_length=FINGERTIP)
        self.backend = _make_cell(cfg, render_mode, gate, object_pose)
        self._start_live()   # self.speed: rad/s of action 1.0
        self.arm = ArmAction(cfg.task, cfg.manipulation.home_q, GRASP_POINT)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(self.spec_.act_dim,),
                                           dtype=np.float32)
        self.observation_space = gym.spaces.Box(-_OBS_BOUND, _OBS_BOUND, shape=(OBS_DIM,),
                                                dtype=np.float32)
        self.target = np.zeros(3)
        self.steps = 0
        self.q = np.asarray(cfg.manipulation.home_q, dtype=np.float64)
        self.qd = np.zeros(6)
        self._interventions_at_reset = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """
        Bring the arm near home with the gripper open, put the cube down, draw a target.

        ``options`` may force the start joints (``'q'``), the cube's (x, y) (``'cube'``), the
        target (``'target'``) or, in simulation, whether the fingers start closed on the cube
        (``'held'``; drawn with probability ``sim.cube_in_gripper`` otherwise).
        """
        super().reset(seed=seed)
        self._episode_boundary()
        options = options or {}
        m, rng = self.cfg.manipulation, self.np_random
        q = options.get('q')
        if q is None:
            q = sample_start(self.start, self.safety, self.backend, rng, also=clears_cube)
        q = np.asarray(q, dtype=np.float64)
        cube = options.get('cube')
        if cube is None:
            cube = rng.uniform(m.object_low, m.object_high)
        held = options.get('held')
        if held is None:   # no draw at 0: the episodes of a seed stay those they were
            share = self.cfg.sim.cube_in_gripper if self.cfg.backend == 'sim' else 0.0
            held = share > 0.0 and rng.uniform() < share
        if held and self.cfg.backend != 'sim':
            raise ValueError("reset option 'held' needs the simulated cell (backend: sim)")
        # The cube starts square to the fingers, as in Fetch and panda-gym; a physical cell
        # waits for it in the start box instead, so the target is drawn from where it lies.
        state = (self.backend.reset_held(q) if held
                 else self.backend.reset_cell(q, np.asarray(cube), 0.0))
        target = options.get('target')
        self.target = (np.asarray(target, dtype=np.float64) if target is not None
                       else self.task.sample_goal(m, self.backend.cell().cube, rng))
        self.backend.show_target(self.target)
        self.safety.reset()
        self._interventions_at_reset = self.safety.interventions
        self.steps = 0
        self.q, self.qd = state.q, state.qd
        obs = self._observation()
        return obs, self._info(obs)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Turn the action into joint velocities and an opening; filter; simulate one period."""
        self._tighten_pending()
        request = self.arm(action[:-1], self.q, self.speed, self.safety)
        command = self.safety(self.q, request)
        grip = float(np.clip(np.nan_to_num(float(action[-1])), -1.0, 1.0))  # NaN: half open
        self.backend.set_gripper((grip + 1.0) / 2.0 * STROKE)
        state = self.backend.step(command)
        interrupted = getattr(self.backend, 'interrupted', None)
        self.q, self.qd = state.q, state.qd
        self.steps += 1
        obs = self._observation()
        info = self._info(obs)
        reward = float(self.goal.compute_reward(obs[OBS_SLICES['cube']],
                                                obs[OBS_SLICES['target']], None))
        terminated = bool(info['is_success'] and self.goal.terminate_on_success)
        truncated = self.steps >= self.cfg.task.max_episode_steps or interrupted is not None
        if interrupted is not None:
            info['interrupted'] = interrupted
        return obs, reward, terminated, truncated, info

    def _check_config(self, cfg: EnvWorkerConfig) -> None:
        self.task.check(cfg)

    def _in_force(self, cfg: EnvWorkerConfig) -> None:
        self.start = start_task(cfg)
        self.spec_ = self.task.spec(cfg)
        self.goal = self.spec_.goal
        self.arm = ArmAction(cfg.task, cfg.manipulation.home_q, GRASP_POINT)
        self.metadata = dict(self.metadata, render_fps=cfg.task.control_hz)

    def _observation(self) -> np.ndarray:
        cell = self.backend.cell()
        angle_axis = transforms3d.quaternions.quat2axangle(
            [cell.cube_quat[3], *cell.cube_quat[:3]])
        parts = {'q': self.q, 'qd': self.qd, 'tcp': cell.tcp, 'tcp_vel': cell.tcp_vel,
                 'width': [cell.width], 'cube': cell.cube,
                 'cube_rot': np.asarray(angle_axis[0]) * angle_axis[1],
                 'cube_vel': cell.cube_vel, 'cube_spin': cell.cube_spin,
                 'to_cube': cell.cube - cell.tcp, 'target': self.target}
        obs = np.empty(OBS_DIM, dtype=np.float32)
        for name, part in parts.items():
            obs[OBS_SLICES[name]] = part
        return np.clip(obs, -_OBS_BOUND, _OBS_BOUND, out=obs)

    def _info(self, obs: np.ndarray) -> dict[str, Any]:
        cube, target = obs[OBS_SLICES['cube']], obs[OBS_SLICES['target']]
        distance = float(np.linalg.norm(cube.astype(np.float64) - target))
        return {'distance': distance,
                'is_success': bool(distance < self.cfg.manipulation.success_distance),
                'safety': self.safety.last_reasons,
                'interventions': self.safety.interventions - self._interventions_at_reset}

    def render(self) -> np.ndarray | None:
        """Return an RGB frame in ``rgb_array`` mode; the GUI draws itself in ``human`` mode."""
        if self.render_mode == 'rgb_array':
            return self.backend.render_rgb()
        return None

    def close(self) -> None:
        """Release the simulator, or stop and release the physical cell."""
        self.backend.close()


def _make_cell(cfg: EnvWorkerConfig, render_mode: str | None, gate: Any,
               board: PoseBoard | None) -> Any:
    """Build the simulated cell, or the physical one (which needs the cube pose's board)."""
    if cfg.backend == 'ur5':
        if board is None:
            raise ConfigError('backend', cfg.backend, 'sim, or ur5 under ROS 2 (the cube pose '
                              'of a physical cell arrives on cell.pose_topic): ros2 launch '
                              'async_rl_ros train.launch.py task:=push')
        if render_mode is not None:
            raise ConfigError('render_mode', render_mode, 'None on a physical arm')
        from async_rl_ros.envs.real_cell import RealCell
        return RealCell(cfg, gate, board)
    from async_rl_ros.envs.pybullet_scene import PyBulletCell
    sim = SimConfig(physics_hz=cfg.sim.physics_hz, gui=cfg.sim.gui or render_mode == 'human',
                    real_time=cfg.sim.real_time)
    return PyBulletCell(sim, cfg.task.dt, cfg.manipulation)
