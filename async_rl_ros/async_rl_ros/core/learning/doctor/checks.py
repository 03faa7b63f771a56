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
Pure checks of the training doctor: NaN/Inf in tensors and batches, update ratio, cosine.

No state and no logging: the :class:`~async_rl_ros.core.learning.doctor.Doctor` and the
learner's insertion path call them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Union

import numpy as np
import torch
from torch import nn

ArrayLike = Union[torch.Tensor, np.ndarray]
Params = Union[nn.Module, Iterable[torch.Tensor], Mapping[str, torch.Tensor]]


def _tensors(params: Params) -> list[torch.Tensor]:
    if isinstance(params, nn.Module):
        return list(params.state_dict().values())
    if isinstance(params, Mapping):
        return list(params.values())
    if isinstance(params, torch.Tensor):
        return [params]
    return list(params)


def _parameters(params: Params) -> list[torch.Tensor]:
    """Return the tensors that may carry ``.grad`` (a module's parameters, not its buffers)."""
    if isinstance(params, nn.Module):
        return list(params.parameters())
    return _tensors(params)


def all_finite(tensors: Iterable[ArrayLike]) -> bool:
    """
    Tell whether every floating-point element of some tensors/arrays is finite.

    Torch tensors are checked with one device synchronisation per device in total.

    :param tensors: tensors or numpy arrays; integer and boolean ones are always finite.
    :returns: ``True`` when nothing is NaN or infinite.
    """
    flags: dict[torch.device, list[torch.Tensor]] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            if (t.is_floating_point() or t.is_complex()) and t.numel():
                flags.setdefault(t.device, []).append(torch.isfinite(t.detach()).all())
        else:
            arr = np.asarray(t)
            if arr.dtype.kind in 'fc' and not np.isfinite(arr).all():
                return False
    return all(bool(torch.stack(group).all()) for group in flags.values())


def params_finite(params: Params) -> bool:
    """
    Tell whether a module's parameters and buffers are all finite; call before publishing.

    :param params: a module, a state dict, or an iterable of tensors.
    :returns: ``True`` when the weights are safe to send to workers.
    """
    return all_finite(_tensors(params))


def _fields(batch: Any) -> list[tuple[str, Any]]:
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return [('batch', batch)]
    if isinstance(batch, Mapping):
        return [(str(k), v) for k, v in batch.items()]
    if dataclasses.is_dataclass(batch):
        return [(f.name, getattr(batch, f.name)) for f in dataclasses.fields(batch)]
    if hasattr(batch, '_asdict'):
        return list(batch._asdict().items())
    return [(str(i), v) for i, v in enumerate(batch)]


def finite_rows(batch: Any) -> ArrayLike:
    """
    Return a boolean mask of the rows (first axis) whose fields are all finite.

    Meant for the replay buffer's insertion path, so that one bad transition is dropped once
    rather than poisoning every batch it is sampled into.

    :param batch: a tensor, an array, or a mapping/dataclass/named tuple/sequence of them with a
        common first axis.
    :returns: a torch bool tensor when the first field is a tensor, else a numpy bool array.
    """
    fields = [v for _, v in _fields(batch)]
    mask = None
    for v in fields:
        if isinstance(v, torch.Tensor):
            ok = torch.isfinite(v.detach()) if v.is_floating_point() else \
                torch.ones_like(v, dtype=torch.bool)
            ok = ok.reshape(ok.shape[0], -1).all(dim=1).cpu().numpy() if ok.dim() else \
                ok.reshape(1).cpu().numpy()
        else:
            arr = np.asarray(v)
            ok = np.isfinite(arr) if arr.dtype.kind in 'fc' else np.ones(arr.shape, bool)
            ok = ok.reshape(ok.shape[0], -1).all(axis=1) if ok.ndim else ok.reshape(1)
        mask = ok if mask is None else mask & ok
    if mask is None:
        mask = np.ones(0, bool)
    if fields and isinstance(fields[0], torch.Tensor):
        return torch.from_numpy(mask).to(fields[0].device)
    return mask


def update_ratio(before: torch.Tensor, after: torch.Tensor, eps: float = 1e-12) -> float:
    """
    Measure the relative size of one update: ``||after - before|| / ||before||``.

    :param before: flattened parameters before the optimizer step.
    :param after: flattened parameters after it.
    :param eps: added to the denominator (all-zero parameters).
    :returns: the ratio (healthy values are about 1e-4 to 1e-3).
    """
    before = before.detach().double()
    after = after.detach().double()
    return float(torch.linalg.vector_norm(after - before) /
                 (torch.linalg.vector_norm(before) + eps))


def cosine_similarity(a: ArrayLike, b: ArrayLike, eps: float = 1e-12) -> float:
    """
    Cosine similarity of two action batches, each flattened into one vector.

    Flattening weights every sample by its action norm, so samples whose actions are near zero
    (where the direction is noise) count little. Two all-zero batches are identical (1.0); one
    all-zero batch against a non-zero one gives 0.0.

    :param a: actions, any shape.
    :param b: actions, same number of elements.
    :returns: the cosine in [-1, 1].
    """
    x = torch.as_tensor(a).detach().reshape(-1).double().cpu()
    y = torch.as_tensor(b).detach().reshape(-1).double().cpu()
    if x.numel() != y.numel():
        raise ValueError(f'action batches differ in size: {x.numel()} vs {y.numel()}')
    nx, ny = float(torch.linalg.vector_norm(x)), float(torch.linalg.vector_norm(y))
    if nx < eps and ny < eps:
        return 1.0
    if nx < eps or ny < eps:
        return 0.0
    return max(-1.0, min(1.0, float(x @ y) / (nx * ny)))


def _ratio(scale: float, ref: float, eps: float = 1e-12) -> float:
    """Return the symmetric ratio ``max(a/b, b/a)`` of two non-negative scales."""
    a, b = max(scale, eps), max(ref, eps)
    return max(a / b, b / a)
