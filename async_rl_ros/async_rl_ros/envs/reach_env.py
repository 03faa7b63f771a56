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
Gymnasium environment of the UR5 reach task on any :class:`ArmBackend`.

Action: a flange velocity in [-1, 1]^3 (``task.action: cartesian``; 1.0 means ``ee_speed``)
or joint velocities in [-1, 1]^6 (``joint``; 1.0 means ``action_scale`` times the joint speed
limit), see :class:`~async_rl_ros.envs.cartesian.ArmAction`. Every command passes the
:class:`SafetyFilter` before the backend sees it.

A backend may set ``interrupted`` (a reason) when a step did not run as commanded (the real
robot's supervisor recovered from a protective stop, a lost link, a stale state or held still
for the policy gate): the episode is then truncated and ``info['interrupted']`` says why.

Configuration changes at run time go through ``apply_config``
(:class:`~async_rl_ros.envs.live_config.LiveConfig`): a tightened limit is in force from the
very next step, everything else -- a loosened limit, the control rate, the episode length,
the task -- from the next reset.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, SimConfig
from async_rl_ros.envs.arm import ArmBackend, ArmState
from async_rl_ros.envs.cartesian import ArmAction
from async_rl_ros.envs.display import check_render_mode, paced_for_watching
from async_rl_ros.envs.live_config import ConfigChange, LIMIT_KEYS, LiveConfig
from async_rl_ros.envs.reach_task import check_starts, OBS_HIGH, OBS_LOW, ReachTask
from async_rl_ros.envs.safety import SafetyFilter
import gymnasium as gym
import numpy as np

__all__ = ['UR5ReachEnv', 'make_reach_env', 'ConfigChange', 'LIMIT_KEYS', 'sample_start']


class UR5ReachEnv(LiveConfig, gym.Env):
    """
    Reach a target point with the UR5 flange.

    :param cfg: worker configuration (task, safety and simulation sections).
    :param backend: the arm; built from ``cfg`` when omitted.
    :param render_mode: ``None``, ``'human'`` (PyBullet GUI) or ``'rgb_array'``.
    """

    metadata = {'render_modes': ['human', 'rgb_array'], 'render_fps': 25}

    def __init__(self, cfg: EnvWorkerConfig | None = None, backend: ArmBackend | None = None,
                 render_mode: str | None = None):
        super().__init__()
        cfg = cfg or EnvWorkerConfig()
        if render_mode not in (None, *self.metadata['render_modes']):
            raise ConfigError('render_mode', render_mode,
                              'one of None, ' + ', '.join(self.metadata['render_modes']))
        check_render_mode(render_mode)  # a GUI without a display would hang, not fail
        cfg.validate()
        check_starts(cfg)
        #: The configuration in force (a private copy: run-time changes come through
        #: :meth:`apply_config`, never by editing the caller's object in place).
        self.cfg = cfg = paced_for_watching(copy.deepcopy(cfg), render_mode)
        self.render_mode = render_mode
        self.metadata = dict(self.metadata, render_fps=cfg.task.control_hz)
        self.task = ReachTask(cfg.task)
        self.safety = SafetyFilter(cfg.safety, cfg.task.dt)
        self.backend = backend if backend is not None else _make_backend(cfg, render_mode)
        self._start_live()        # self.speed: rad/s of action 1.0
        self.arm = ArmAction(cfg.task, cfg.task.home_q)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(self.arm.dim,), dtype=np.float32)
        self.observation_space = gym.spaces.Box(OBS_LOW, OBS_HIGH, dtype=np.float32)
        self.state: ArmState | None = None
        self.target = np.zeros(3)
        self.steps = 0
        self._interventions_at_reset = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """
        Bring the arm near home at rest and draw a target.

        ``options`` may force the start joints (``'q'``, rad) or the target (``'target'``, m).
        """
        super().reset(seed=seed)
        self._episode_boundary()
        options = options or {}
        q = options.get('q')
        self.state = self.backend.reset(q if q is not None else self._sample_start())
        target = options.get('target')
        self.target = (np.asarray(target, dtype=np.float64) if target is not None
                       else self.task.sample_target(self.np_random))
        self.safety.reset()
        self._interventions_at_reset = self.safety.interventions
        self.steps = 0
        show = getattr(self.backend, 'show_target', None)
        if show is not None:
            show(self.target)
        distance = self.task.distance(self.state, self.target)
        return self.task.observation(self.state, self.target), self._info(distance, ())

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Filter the action, hold it for one control period and score the result."""
        if self.state is None:
            raise RuntimeError('call reset() before step()')
        self._tighten_pending()
        request = self.arm(action, self.state.q, self.speed, self.safety)
        command = self.safety(self.state.q, request)
        self.state = self.backend.step(command)
        interrupted = getattr(self.backend, 'interrupted', None)
        self.steps += 1
        distance = self.task.distance(self.state, self.target)
        reward = self.task.reward(distance, action)
        success = self.task.success(distance)
        terminated = bool(success and self.cfg.task.terminate_on_success)
        truncated = self.steps >= self.cfg.task.max_episode_steps or interrupted is not None
        obs = self.task.observation(self.state, self.target)
        info = self._info(distance, self.safety.last_reasons)
        if interrupted is not None:
            info['interrupted'] = interrupted
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------ live configuration
    def _check_config(self, cfg: EnvWorkerConfig) -> None:
        check_starts(cfg)

    def _in_force(self, cfg: EnvWorkerConfig) -> None:
        self.task = ReachTask(cfg.task)
        self.arm = ArmAction(cfg.task, cfg.task.home_q)
        self.metadata = dict(self.metadata, render_fps=cfg.task.control_hz)

    def _sample_start(self) -> np.ndarray:
        return sample_start(self.task, self.safety, self.backend, self.np_random)

    def render(self) -> np.ndarray | None:
        """Return an RGB frame in ``rgb_array`` mode; the GUI draws itself in ``human`` mode."""
        if self.render_mode == 'rgb_array':
            return self.backend.render_rgb()
        return None

    def close(self) -> None:
        """Release the backend."""
        self.backend.close()

    def _info(self, distance: float, reasons: tuple[str, ...]) -> dict[str, Any]:
        return {'distance': distance, 'is_success': self.task.success(distance),
                'safety': reasons,
                'interventions': self.safety.interventions - self._interventions_at_reset}


def sample_start(task: ReachTask, safety: SafetyFilter, backend: Any,
                 rng: np.random.Generator,
                 also: Callable[[np.ndarray], bool] | None = None) -> np.ndarray:
    """
    Draw a start pose inside the safety limits that the backend's arm can also move to.

    A real arm (a backend that does not ``teleports``) moves there on a straight joint path
    from where it is: that path must stay in the box too.

    :param also: a further test a start must pass (the cube tasks: fingertips above the cube).
    """
    def pose_ok(q: np.ndarray) -> bool:
        return safety.pose_ok(q) and (also is None or also(q))

    accept = pose_ok
    if not getattr(backend, 'teleports', False):
        try:
            q_now = backend.read().q
        except RuntimeError:  # no fresh state (lost link): the backend's reset recovers
            return task.sample_start(rng, accept)

        def accept(q: np.ndarray) -> bool:
            return pose_ok(q) and safety.path_ok(q_now, q)
    return task.sample_start(rng, accept)


def _make_backend(cfg: EnvWorkerConfig, render_mode: str | None) -> ArmBackend:
    if cfg.backend == 'sim':
        from async_rl_ros.envs.pybullet_backend import PyBulletUR5
        sim = SimConfig(physics_hz=cfg.sim.physics_hz,
                        gui=cfg.sim.gui or render_mode == 'human')
        return PyBulletUR5(sim, cfg.task.dt)
    if cfg.backend == 'ur5':
        from async_rl_ros.envs.ur5_rtde import UR5RTDE
        return UR5RTDE(cfg)
    raise ConfigError('backend', cfg.backend, 'sim or ur5')


def make_reach_env(cfg: EnvWorkerConfig | None = None, render_mode: str | None = None,
                   **flat: Any) -> UR5ReachEnv:
    """
    Build the simulated reach environment; keyword arguments override dotted config keys.

    Example: ``make_reach_env(**{'task.control_hz': 50.0})``.
    """
    cfg = cfg or EnvWorkerConfig()
    if flat:
        cfg = cfg.replace(**flat)
    return UR5ReachEnv(cfg, render_mode=render_mode)
