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
Build env workers from the ``env_worker`` section: the task's environment on its arm.

What every transport calls to get a worker (the local runner's worker processes, the ROS 2
``env_worker`` node) or an environment (the evaluator, the policy runner): the task plug-in
named by ``task.name`` (:mod:`async_rl_ros.envs.tasks`) builds the environment, checked first;
a physical UR5 acts behind a :class:`~async_rl_ros.envs.rtde_supervisor.PolicyGate` built
from ``rtde.*``. The core's :class:`~async_rl_ros.core.workers.runtime.WorkerRuntime` then
runs the :class:`~async_rl_ros.core.workers.runtime.BuiltWorker`.
"""

from __future__ import annotations

from typing import Any, Sequence

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig
from async_rl_ros.core.tasks import TaskSpec
from async_rl_ros.core.workers.env_worker import EnvWorker, WorkerPolicy
from async_rl_ros.core.workers.runtime import BuiltWorker
from async_rl_ros.envs.object_pose import PoseBoard
from async_rl_ros.envs.tasks import resolve_task

__all__ = ['build_env', 'build_worker', 'check_config', 'evaluation_config', 'evaluation_env',
           'worker_seed', 'needs_object_pose', 'outside_training', 'TRAINING_ONLY']

#: Options that shape only the episodes a learning worker collects, with the values every
#: other env (an evaluation, a fixed policy, a test) runs with.
TRAINING_ONLY = {'sim.cube_in_gripper': 0.0}


def outside_training(cfg: EnvWorkerConfig) -> EnvWorkerConfig:
    """Return ``cfg`` as every env but a learning worker's runs it (:data:`TRAINING_ONLY`)."""
    return cfg.replace(**TRAINING_ONLY)


def worker_seed(cfg: EnvWorkerConfig, worker_id: int, restarts: int = 0) -> int:
    """Return the seed of worker ``worker_id`` after ``restarts`` respawns."""
    return cfg.seed + 1000 * int(worker_id) + int(restarts)


def check_config(cfg: EnvWorkerConfig) -> None:
    """Refuse (``ConfigError``) a configuration the task of ``cfg.task.name`` cannot run."""
    resolve_task(cfg)


def needs_object_pose(cfg: EnvWorkerConfig) -> bool:
    """Whether the worker of ``cfg`` acts on an object pose its transport must feed."""
    task, _ = resolve_task(cfg)
    return cfg.backend == 'ur5' and bool(getattr(task, 'object_pose', False))


def build_env(cfg: EnvWorkerConfig, gate: Any = None, object_pose: PoseBoard | None = None,
              *, training: bool = False, render_mode: str | None = None
              ) -> tuple[Any, TaskSpec]:
    """
    Build (connect) the environment of ``cfg.task.name`` on ``cfg.backend``, with its spec.

    :param cfg: the ``env_worker`` section.
    :param gate: the policy gate of a learning worker on a physical arm; ``None`` lets every
        command through (a fixed policy).
    :param object_pose: the board the transport feeds with the pose of the object a physical
        cell moves (:func:`needs_object_pose`).
    :param training: the env of a learning worker: :data:`TRAINING_ONLY` options apply (any
        other env runs with their values there).
    :param render_mode: ``'human'`` or ``'rgb_array'`` for a person to watch (``None``: no
        rendering).
    :raises ConfigError: an unknown task, or a configuration the task refuses.
    """
    task, spec = resolve_task(cfg)
    if not training:
        cfg = outside_training(cfg)
    extra = {'object_pose': object_pose} if getattr(task, 'object_pose', False) else {}
    if render_mode is not None:
        extra['render_mode'] = render_mode
    env = task.make_env(cfg, gate=gate, **extra)
    _check_spaces(env, spec)
    return env, spec


def evaluation_config(cfg: EnvWorkerConfig) -> EnvWorkerConfig:
    """Return ``cfg`` as evaluations run it: always simulated, never paced, no window."""
    return cfg.replace(**{'backend': 'sim', 'sim.real_time': False, 'sim.gui': False})


def evaluation_env(cfg: EnvWorkerConfig) -> tuple[Any, TaskSpec]:
    """Build the environment evaluations run on (:func:`evaluation_config`)."""
    return build_env(evaluation_config(cfg))


def build_worker(cfg: EnvWorkerConfig, worker_id: int, hidden: Sequence[int],
                 batch_size: int, restarts: int = 0,
                 object_pose: PoseBoard | None = None, max_batch_lag: int = 0) -> BuiltWorker:
    """
    Build (and, for a physical arm, connect) one env worker.

    The worker's process does its inference on one thread, warmed up before the first action
    (:meth:`~async_rl_ros.core.workers.env_worker.WorkerPolicy.fit_for_control`): a control
    loop shares the machine with the learner and cannot wait for a cold first call.

    :param cfg: the ``env_worker`` section.
    :param worker_id: stamped on every transition.
    :param hidden: hidden layer widths of the learner's actor.
    :param batch_size: transitions per batch handed to the transport.
    :param restarts: respawns so far (each gets a new seed).
    :param object_pose: the board of the object's pose (:func:`needs_object_pose`).
    :param max_batch_lag: policy versions after which a partly filled batch is sent (the
        transport's ``max_batch_lag``; 0: full batches only).
    """
    gate = None
    if cfg.backend == 'ur5':
        from async_rl_ros.envs.rtde_supervisor import PolicyGate
        gate = PolicyGate.from_config(cfg.rtde)
    env, spec = build_env(cfg, gate, object_pose, training=True)
    seed = worker_seed(cfg, worker_id, restarts)
    source = 'real' if cfg.backend == 'ur5' else 'sim'
    policy = WorkerPolicy(spec.obs_dim, spec.act_dim, hidden, seed)
    policy.fit_for_control()  # one inference thread, warmed up before the first command
    worker = EnvWorker(worker_id, env, policy, batch_size=batch_size, seed=seed, source=source,
                       rank=spec.rank, max_batch_lag=max_batch_lag)
    return BuiltWorker(worker, env, gate, source, seed)


def _check_spaces(env: Any, spec: TaskSpec) -> None:
    """Refuse an environment whose spaces are not what its task's spec declares."""
    obs, act = env.observation_space.shape, env.action_space.shape
    if obs != (spec.obs_dim,) or act != (spec.act_dim,):
        env.close()
        raise ConfigError('task.name', spec.name, f'a task whose environment matches its '
                          f'spec: observations {obs} and actions {act} where the spec '
                          f'declares ({spec.obs_dim},) and ({spec.act_dim},)')
