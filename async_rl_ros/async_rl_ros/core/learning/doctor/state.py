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


"""State the training doctor keeps: good-state snapshots, update ratios, running statistics."""

from __future__ import annotations

import copy
import math
from typing import Any, Iterable, Mapping

from async_rl_ros.core.learning.doctor.checks import ArrayLike, update_ratio
import numpy as np
import torch
from torch import nn


def _clone(obj: Any) -> Any:
    """Deep-copy a (nested) state dict, cloning tensors on their own device."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clone(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_clone(v) for v in obj)
    return copy.deepcopy(obj)


# ====================================================================== snapshots
class GoodState:
    """
    Snapshot of the learner's last known-good weights, optimizer states and loose tensors.

    :meth:`remember` keeps references to the objects and clones their state (tensors stay on
    their device, so a snapshot of GPU weights costs device memory, not a host copy);
    :meth:`restore` writes the clones back in place, so parameter identity -- and with it the
    optimizers' references -- is preserved.
    """

    def __init__(self) -> None:
        self._modules: dict[str, nn.Module] = {}
        self._optimizers: dict[str, torch.optim.Optimizer] = {}
        self._tensors: dict[str, torch.Tensor] = {}
        self._saved: dict[str, Any] | None = None
        self.step: int | None = None

    @property
    def has_snapshot(self) -> bool:
        """Tell whether :meth:`remember` has been called."""
        return self._saved is not None

    def remember(self, modules: Mapping[str, nn.Module],
                 optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
                 tensors: Mapping[str, torch.Tensor] | None = None,
                 step: int | None = None) -> None:
        """
        Clone the current state of some modules, optimizers and tensors.

        :param modules: networks (actor, critics, target critics ...).
        :param optimizers: their optimizers.
        :param tensors: loose tensors such as ``log_alpha``.
        :param step: learner update the snapshot belongs to (for logs).
        """
        self._modules = dict(modules)
        self._optimizers = dict(optimizers or {})
        self._tensors = dict(tensors or {})
        self._saved = {
            'modules': {k: _clone(m.state_dict()) for k, m in self._modules.items()},
            'optimizers': {k: _clone(o.state_dict()) for k, o in self._optimizers.items()},
            'tensors': {k: t.detach().clone() for k, t in self._tensors.items()},
        }
        self.step = step

    def restore(self, keep_hyperparameters: bool = True) -> None:
        """
        Write the snapshot back into the remembered objects.

        :param keep_hyperparameters: keep the optimizers' current hyperparameters (learning
            rate ...) so remedies applied since the snapshot survive; only the per-parameter
            optimizer state (moments, step counts) is restored.
        :raises RuntimeError: when nothing was remembered.
        """
        if self._saved is None:
            raise RuntimeError('GoodState.restore() before remember()')
        for name, module in self._modules.items():
            module.load_state_dict(self._saved['modules'][name])
        for name, opt in self._optimizers.items():
            state = _clone(self._saved['optimizers'][name])
            if keep_hyperparameters:
                state['param_groups'] = opt.state_dict()['param_groups']
            opt.load_state_dict(state)
        with torch.no_grad():
            for name, tensor in self._tensors.items():
                tensor.copy_(self._saved['tensors'][name])


class ParamDeltaTracker:
    """
    Measure ``||dtheta|| / ||theta||`` of one optimizer step of a set of parameters.

    :param parameters: the parameters (e.g. ``actor.parameters()``); kept as a list.
    """

    def __init__(self, parameters: Iterable[torch.Tensor]):
        self.parameters = list(parameters)
        self._before: torch.Tensor | None = None

    def capture(self) -> None:
        """Copy the parameters; call right before the optimizer step."""
        self._before = torch.nn.utils.parameters_to_vector(
            [p.detach() for p in self.parameters]).clone()

    def ratio(self) -> float | None:
        """
        Compare the parameters with the last capture; call right after the optimizer step.

        :returns: the update ratio, or ``None`` without a capture (consumed by this call).
        """
        if self._before is None:
            return None
        after = torch.nn.utils.parameters_to_vector([p.detach() for p in self.parameters])
        before, self._before = self._before, None
        return update_ratio(before, after)


class RunningStats:
    """Running count, mean, variance (Welford/Chan, batched) and mean of ``|x|``."""

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.abs_mean = 0.0

    def update(self, values: ArrayLike) -> None:
        """
        Add a batch of values; non-finite ones are ignored.

        :param values: any shape.
        """
        if isinstance(values, torch.Tensor):
            values = values.detach().cpu().numpy()
        x = np.asarray(values, dtype=np.float64).reshape(-1)
        x = x[np.isfinite(x)]
        n = x.size
        if n == 0:
            return
        mean = float(x.mean())
        m2 = float(((x - mean) ** 2).sum())
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.count * n / total
        self.abs_mean += (float(np.abs(x).mean()) - self.abs_mean) * n / total
        self.count = total

    @property
    def var(self) -> float:
        """Return the population variance (0 before two values)."""
        return self.m2 / self.count if self.count > 1 else 0.0

    @property
    def std(self) -> float:
        """Return the population standard deviation."""
        return math.sqrt(self.var)
