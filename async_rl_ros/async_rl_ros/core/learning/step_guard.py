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
The step guard: what decides whether one optimizer step of the SAC update is applied.

:meth:`async_rl_ros.core.learning.sac.SAC.update` takes each optimizer step through
:func:`guarded_step`, which hands a guard the step's losses, the parameters the step would
change and their gradient norm, after the backward pass and before the optimizer step; a guard
that returns ``False`` skips the step. :class:`FiniteGuard` refuses exactly the non-finite
steps; :class:`DoctorGuard`, the training doctor's, is one that also counts and restores.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch
from torch import nn

__all__ = ['Guard', 'FiniteGuard', 'DoctorGuard', 'all_finite', 'finite_guard', 'fused_adam',
           'guarded_step']

#: ``guard(losses, parameters, grad_norm) -> apply the step?``
Guard = Callable[[Mapping[str, torch.Tensor], Sequence[torch.Tensor], torch.Tensor], bool]


def all_finite(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Return, on their device, whether every element of some tensors is finite (no sync)."""
    return torch.isfinite(torch.cat([t.detach().float().reshape(-1) for t in tensors])).all()


class FiniteGuard:
    """
    A guard that refuses exactly the steps whose losses or gradient norm are not finite.

    The decision depends on the step's tensors alone, so a CUDA graph can take it on the
    device: the graphed update calls :meth:`passed` after an update that was finite throughout,
    and calls the guard itself only when it redoes an update eagerly (see
    :meth:`~async_rl_ros.core.learning.sac.SAC.update`). Subclasses act on a refusal (the
    training doctor counts and restores); they must not refuse a finite step.
    """

    def __call__(self, losses: Mapping[str, torch.Tensor], parameters: Sequence[torch.Tensor],
                 grad_norm: torch.Tensor) -> bool:
        """
        Accept a step only if every loss and the gradient norm are finite.

        :param losses: the losses of the step.
        :param parameters: the parameters the step would change.
        :param grad_norm: the total gradient norm of the networks' parameters (non-finite when
            any of their gradients is; the temperature's gradient equals ``alpha_loss``).
        :returns: whether to apply the step.
        """
        return bool(all_finite([*losses.values(), grad_norm]))

    def passed(self) -> None:
        """Record an update whose every step a CUDA graph found finite (nothing to do here)."""


#: The default guard.
finite_guard = FiniteGuard()


class DoctorGuard(FiniteGuard):
    """The training doctor as SAC's guard: it refuses exactly the non-finite steps."""

    def __init__(self, doctor):
        """:param doctor: a :class:`~async_rl_ros.core.learning.doctor.Doctor`."""
        self.doctor = doctor

    def __call__(self, losses: Mapping[str, torch.Tensor], parameters: Sequence[torch.Tensor],
                 grad_norm: torch.Tensor) -> bool:
        """Judge a step with ``Doctor.step_ok`` (a refusal is counted and acted on)."""
        return self.doctor.step_ok(losses, parameters, grad_norm)

    def passed(self) -> None:
        """Record an update a CUDA graph found finite."""
        self.doctor.step_passed()


def fused_adam(parameters: Sequence[torch.Tensor], lr: float,
               capturable: bool) -> torch.optim.Adam:
    """
    Return Adam with the fused kernel (CPU and CUDA): one call per step, not one per tensor.

    :param capturable: keep the step counts on the device, so that a CUDA graph can record the
        step.
    """
    return torch.optim.Adam(parameters, lr=lr, fused=True, capturable=capturable)


def guarded_step(optimizers: Sequence[torch.optim.Optimizer], parameters: list[torch.Tensor],
                 clipped: list[torch.Tensor], losses: dict[str, torch.Tensor],
                 guard: Guard | None, clip_norm: float) -> tuple[bool, torch.Tensor]:
    """
    Apply one optimizer step unless the guard refuses it; return (applied, gradient norm).

    The gradient norm of ``clipped`` is measured once: the guard judges it (a non-finite
    gradient makes it non-finite) and the clipping scales by it.

    :param parameters: what the step changes (handed to the guard).
    :param clipped: the parameters whose gradients are measured and clipped.
    :param guard: ``None`` applies every step.
    :param clip_norm: the largest total gradient norm of ``clipped`` (0: no clipping).
    """
    grads = [p.grad for p in clipped if p.grad is not None]
    norm = nn.utils.get_total_norm(grads)
    if guard is not None and not guard(losses, parameters, norm):
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        return False, norm
    if clip_norm > 0:
        nn.utils.clip_grads_with_norm_(clipped, clip_norm, norm)
    for optimizer in optimizers:
        optimizer.step()
    return True, norm
