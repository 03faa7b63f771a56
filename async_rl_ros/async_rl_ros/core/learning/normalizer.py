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
Running observation statistics, shared by the learner and (through the weights) the workers.

Batches are merged with the parallel-variance formula of Chan, Golub and LeVeque (1979), so
one update per incoming batch costs the same as one per transition.
"""

from __future__ import annotations

import numpy as np

__all__ = ['RunningNormalizer']


class RunningNormalizer:
    """
    Mean and standard deviation of observations, per dimension.

    :param dim: observation size.
    :param clip: normalized values are clipped to [-clip, clip].
    :param min_std: floor of the standard deviation (dimensions that never change, e.g. a
        fixed target coordinate, would otherwise blow up).
    """

    def __init__(self, dim: int, clip: float = 10.0, min_std: float = 1e-2):
        self.dim = dim
        self.clip = clip
        self.min_std = min_std
        self.count = 0
        self.mean = np.zeros(dim, dtype=np.float64)
        self.m2 = np.zeros(dim, dtype=np.float64)  # sum of squared deviations

    def update(self, batch: np.ndarray) -> None:
        """Merge a batch of shape (n, dim) into the statistics."""
        batch = np.asarray(batch, dtype=np.float64).reshape(-1, self.dim)
        n = batch.shape[0]
        if n == 0:
            return
        batch_mean = batch.mean(axis=0)
        batch_m2 = ((batch - batch_mean) ** 2).sum(axis=0)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + batch_m2 + delta ** 2 * (self.count * n / total)
        self.count = total

    @property
    def std(self) -> np.ndarray:
        """Return the standard deviation per dimension (floored at ``min_std``)."""
        var = self.m2 / self.count if self.count > 0 else np.ones(self.dim)
        return np.maximum(np.sqrt(var), self.min_std)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """Return ``(x - mean) / std`` clipped, as float32."""
        z = (np.asarray(x, dtype=np.float64) - self.mean) / self.std
        return np.clip(z, -self.clip, self.clip).astype(np.float32)

    def stats(self) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(mean, std)`` as float32 arrays, as published with the policy weights."""
        return self.mean.astype(np.float32), self.std.astype(np.float32)

    def state_dict(self) -> dict:
        """Return the statistics for a checkpoint."""
        return {'count': self.count, 'mean': self.mean.copy(), 'm2': self.m2.copy()}

    def load_state_dict(self, state: dict) -> None:
        """Restore statistics saved by :meth:`state_dict`."""
        self.count = int(state['count'])
        self.mean = np.array(state['mean'], dtype=np.float64)
        self.m2 = np.array(state['m2'], dtype=np.float64)
