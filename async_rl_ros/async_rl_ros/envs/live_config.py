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
Configuration changes while an environment runs: a tightened limit at once, the rest later.

The ``env_worker`` node hands every accepted parameter change to the env's ``apply_config``
(from its parameter callback: thread-safe, returns at once). A change that tightens a limit
(:data:`LIMIT_KEYS`) is in force from the very next step -- the env then enforces what both
the old and the new values allow -- and everything else (a loosened limit, the control rate,
the episode length, the task's options) from the next reset. Read-only options cannot change.
:class:`LiveConfig` is that mechanism for every UR5 env (reach and the cube tasks).
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from typing import Any, NamedTuple

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig
from async_rl_ros.envs.display import paced_for_watching

__all__ = ['LiveConfig', 'ConfigChange', 'LIMIT_KEYS', 'joint_speeds']

#: Limits a run-time change may tighten at once: key -> +1 when a larger value is tighter,
#: -1 when a smaller one is. The safety filter applies its section itself.
LIMIT_KEYS = {
    'task.action_scale': -1, 'rtde.speed_scaling': -1, 'rtde.acceleration': -1,
    'rtde.reset_speed': -1, 'rtde.reset_acceleration': -1,
    'safety.joint_lower': +1, 'safety.joint_upper': -1, 'safety.joint_margin': +1,
    'safety.max_joint_speed': -1, 'safety.max_joint_accel': -1, 'safety.workspace_low': +1,
    'safety.workspace_high': -1, 'safety.workspace_margin': +1,
}
_READ_ONLY = frozenset(name for name, _, info, _ in EnvWorkerConfig.options() if info.read_only)
_RTDE_LIMITS = ('speed_scaling', 'acceleration', 'reset_speed', 'reset_acceleration')


class ConfigChange(NamedTuple):
    """What :meth:`LiveConfig.apply_config` did with the changed keys."""

    now: tuple[str, ...]           #: tightened limits, in force from the next step
    next_episode: tuple[str, ...]  #: everything else (loosened limits too), from the next reset

    def __str__(self) -> str:
        return (f'applied from the next step: {", ".join(self.now) or "-"}; '
                f'from the next episode: {", ".join(self.next_episode) or "-"}')


def joint_speeds(cfg: EnvWorkerConfig) -> list[float]:
    """Return the joint speeds (rad/s) of an action 1.0: ``action_scale`` times the limits."""
    return [cfg.task.action_scale * v for v in cfg.safety.max_joint_speed]


class LiveConfig:
    """
    Run-time configuration of an env (a mix-in).

    The env keeps its own ``cfg``, ``safety``
    (:class:`~async_rl_ros.envs.safety.SafetyFilter`) and ``backend``; this keeps ``speed``,
    the joint speeds (rad/s) of an action 1.0. The env calls :meth:`_start_live` once built,
    :meth:`_tighten_pending` at the start of every step and :meth:`_episode_boundary` at
    every reset, and may implement :meth:`_check_config` (what a new configuration must
    satisfy) and :meth:`_in_force` (what depends on the whole configuration, at a reset).
    """

    cfg: EnvWorkerConfig
    safety: Any
    backend: Any
    render_mode: str | None

    def _start_live(self) -> None:
        self.speed = joint_speeds(self.cfg)
        self._live_lock = threading.Lock()
        self._target = self.cfg      # the newest accepted configuration
        self._incoming: EnvWorkerConfig | None = None   # for the stepping thread to tighten
        _use_config(self.backend, self.cfg)

    def apply_config(self, cfg: EnvWorkerConfig) -> ConfigChange:
        """
        Take a changed configuration while running (thread-safe; returns at once).

        :param cfg: the new, validated configuration (it is copied).
        :returns: which changed keys apply from the next step and which from the next episode.
        :raises ConfigError: a read-only option differs, or the new values do not fit the
            task (its start poses, say).
        """
        cfg = paced_for_watching(copy.deepcopy(cfg), self.render_mode)  # watched: still paced
        self._check_config(cfg)
        with self._live_lock:
            change = _diff(self._target, cfg)
            self._target = cfg
            if change.now:
                self._incoming = cfg
        return change

    def _tighten_pending(self) -> None:
        """Put in force what both the current and the newest limits allow (stepping thread)."""
        with self._live_lock:
            new, self._incoming = self._incoming, None
        if new is None:
            return
        cur = self.cfg
        self.safety.update(new.safety)
        task = dataclasses.replace(cur.task, action_scale=min(cur.task.action_scale,
                                                              new.task.action_scale))
        rtde = dataclasses.replace(cur.rtde, **{
            name: min(getattr(cur.rtde, name), getattr(new.rtde, name)) for name in _RTDE_LIMITS})
        self.cfg = dataclasses.replace(cur, task=task, safety=self.safety.cfg, rtde=rtde)
        self.speed = [min(a, b) for a, b in zip(self.speed, joint_speeds(new))]
        _use_config(self.backend, self.cfg)

    def _episode_boundary(self) -> None:
        """Put the newest configuration in force (the arm is about to be reset)."""
        with self._live_lock:
            new, self._incoming = self._target, None
        if new is self.cfg:
            return
        self.safety.update(new.safety)
        self.safety.episode_boundary(new.task.dt)
        self.cfg = new
        self.speed = joint_speeds(new)
        self._in_force(new)
        _use_config(self.backend, new)

    def _check_config(self, cfg: EnvWorkerConfig) -> None:
        """Refuse (``ConfigError``) a configuration the env cannot take."""

    def _in_force(self, cfg: EnvWorkerConfig) -> None:
        """Rebuild what depends on the whole configuration (at a reset)."""


def _use_config(backend: Any, cfg: EnvWorkerConfig) -> None:
    use = getattr(backend, 'use_config', None)
    if use is not None:
        use(cfg)


def _diff(old: EnvWorkerConfig, new: EnvWorkerConfig) -> ConfigChange:
    """Sort the changed keys into tightened limits (now) and the rest (next episode)."""
    a, b = old.to_flat(), new.to_flat()
    now, later = [], []
    for key, value in b.items():
        if value == a[key]:
            continue
        if key in _READ_ONLY:
            raise ConfigError(key, value, f'{a[key]!r}: read-only while the worker runs')
        sign = LIMIT_KEYS.get(key)
        pairs = list(zip(a[key], value)) if isinstance(value, list) else [(a[key], value)]
        if sign is not None and any(sign * (y - x) > 0 for x, y in pairs):
            now.append(key)
        if sign is None or any(sign * (y - x) < 0 for x, y in pairs):
            later.append(key)
    return ConfigChange(tuple(now), tuple(later))
