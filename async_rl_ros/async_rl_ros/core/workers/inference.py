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
Inference fit for a control loop: one thread, frozen, warmed up, its latency measured.

A policy that acts on an arm answers within a fraction of a control period, every time,
while a learner may train on the same machine. With torch's defaults it does not: its
intra-op pool spreads a tiny forward pass over every core (18-20 ms under load against
0.05 ms on one thread), and the first calls of a TorchScript module run its profiling
executor (hundreds of ms). So, before the first command:

* :func:`control_threads` -- one intra-op thread (and one inter-op thread while torch still
  allows changing it); process-wide, so only for a process whose torch work is the arm's;
* :class:`FittedPolicy` -- an exported TorchScript policy frozen (``torch.jit.freeze``:
  weights become constants), run :data:`WARMUP_CALLS` times on a zero observation, then
  timed on every call (``first_action_ms``, percentiles) and reported to the step budget
  (:func:`async_rl_ros.core.workers.step_budget.note`); :meth:`FittedPolicy.load` reads a
  policy file only once its manifest fits the task (:mod:`async_rl_ros.core.policy_file`) and
  checks the width and finiteness of the warm-up's actions;
* :func:`warm_up` -- the same warm-up for an eager module (the worker's actor, whose weights
  change with every policy update and so cannot be frozen).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable
import warnings

from async_rl_ros.core.errors import first_line
from async_rl_ros.core.policy_file import load_policy_file, PolicyFileError
from async_rl_ros.core.workers.step_budget import note, Percentiles
import numpy as np
import torch

__all__ = ['control_threads', 'warm_up', 'TimedInference', 'FittedPolicy', 'WARMUP_CALLS']

_LOG = logging.getLogger(__name__)
WARMUP_CALLS = 8   # forward passes before the first command (TorchScript optimizes on 1-2)


def control_threads(threads: int = 1) -> None:
    """Run this process's torch work on ``threads`` intra-op threads (and one inter-op)."""
    torch.set_num_threads(int(threads))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass   # torch allows it only before the first parallel work: the intra-op count rules


def warm_up(call: Callable[[torch.Tensor], Any], obs_dim: int,
            calls: int = WARMUP_CALLS) -> float:
    """
    Run ``call`` ``calls`` times on a zero observation (batch of one), then once more timed.

    Torch's global random generator is left as it was (a seeded run stays repeatable).

    :returns: the time of the timed call (ms): what the first real action will take.
    """
    x = torch.zeros(1, int(obs_dim))
    with torch.random.fork_rng(devices=[]), torch.inference_mode():
        for _ in range(int(calls)):
            call(x)
        start = time.perf_counter()
        call(x)
        return 1000.0 * (time.perf_counter() - start)


class TimedInference:
    """
    The timing every policy that acts on an arm keeps: each call's latency, the first one.

    :meth:`_timed` reports a call to the step budget of the calling thread's control loop
    (its ``policy`` phase) as well.
    """

    def __init__(self) -> None:
        self.first_action_ms: float | None = None   #: latency (ms) of the first real action
        self.latency = Percentiles()                #: latency (ms) of every action

    def _timed(self, seconds: float) -> None:
        note('policy', seconds)
        self.latency.add(1000.0 * seconds)
        if self.first_action_ms is None:
            self.first_action_ms = round(1000.0 * seconds, 3)


class FittedPolicy(TimedInference):
    """
    An exported (TorchScript) deterministic policy, fit for a control loop.

    :param module: the policy, ``obs -> action`` (batch first); a ``torch.jit.ScriptModule``
        is frozen, anything else is used as it is.
    :param obs_dim: observation width (for the warm-up).
    :param threads: intra-op threads (:func:`control_threads`; ``None`` leaves them).
    :param act_dim: action width: the warm-up's actions must have it and be finite
        (``ValueError`` otherwise); ``None``: not checked.
    """

    def __init__(self, module: Any, obs_dim: int, threads: int | None = 1,
                 act_dim: int | None = None):
        if threads is not None:
            control_threads(threads)
        module = module.eval() if hasattr(module, 'eval') else module
        self.frozen = False
        if isinstance(module, torch.jit.ScriptModule):
            try:
                with warnings.catch_warnings():   # deprecated in torch 2.x, still the fastest
                    warnings.simplefilter('ignore', DeprecationWarning)
                    module = torch.jit.freeze(module)
                self.frozen = True
            except (RuntimeError, AttributeError) as exc:  # e.g. a module without forward
                _LOG.warning('the policy cannot be frozen (%s); it runs unfrozen', exc)
        self.module = module
        self.obs_dim = int(obs_dim)
        #: latency (ms) the first action will have, measured right after the warm-up
        self.warm_ms = warm_up(module, self.obs_dim)
        if act_dim is not None:
            self._check_actions(int(act_dim))
        super().__init__()

    def _check_actions(self, act_dim: int) -> None:
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            action = self.module(torch.zeros(1, self.obs_dim))
        shape = tuple(getattr(action, 'shape', ()))
        if shape != (1, act_dim):
            raise ValueError(f'the policy returns actions of shape {shape}, the task takes '
                             f'{(1, act_dim)}')
        if not bool(torch.isfinite(action).all()):
            raise ValueError('the policy returns non-finite actions')

    @classmethod
    def load(cls, path: str, task: str, obs_dim: int, act_dim: int,
             threads: int | None = 1) -> 'FittedPolicy':
        """
        Load an exported policy file (``policy.pt``) for a task, checked, and fit it.

        :raises PolicyFileError: the file does not fit (see
            :func:`~async_rl_ros.core.policy_file.load_policy_file`), or its actions do not.
        """
        module, _ = load_policy_file(path, task, obs_dim, act_dim)
        try:
            return cls(module, obs_dim, threads, act_dim=act_dim)
        except (RuntimeError, ValueError) as exc:  # its layers do not take this observation
            raise PolicyFileError(f'{path}: does not act in task {task!r}: '
                                  f'{first_line(exc)}') from None

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Return the action for one observation; timed and reported to the step budget."""
        start = time.perf_counter()
        with torch.inference_mode():
            x = torch.as_tensor(np.asarray(obs, np.float32)).reshape(1, self.obs_dim)
            action = self.module(x)[0].numpy()
        self._timed(time.perf_counter() - start)
        return action

    def summary(self) -> dict[str, Any]:
        """Return ``first_action_ms``, ``warm_ms``, ``frozen`` and ``policy_ms`` percentiles."""
        return {'first_action_ms': self.first_action_ms, 'warm_ms': round(self.warm_ms, 3),
                'frozen': self.frozen, 'policy_ms': self.latency.summary()}
