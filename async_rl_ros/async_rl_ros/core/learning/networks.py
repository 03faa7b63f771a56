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
Networks of SAC: a tanh-squashed Gaussian actor, twin Q critics and an exportable policy.

Actions live in [-1, 1] (the environment normalizes them), so the actor never rescales.
Observations reach these networks already normalized; only :class:`PolicyForExport` carries a
fixed ``obs_mean`` / ``obs_std`` pair, so that a worker runs exactly what the learner runs.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ['LOG_STD_MIN', 'LOG_STD_MAX', 'NO_CLIP', 'mlp', 'inverted_dropout', 'Actor',
           'PolicyForExport', 'EnsembleLinear', 'EnsembleLayerNorm', 'TwinQ']

LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0
#: ``obs_clip`` of a :class:`PolicyForExport` without a bound: the largest float32.
NO_CLIP = float(torch.finfo(torch.float32).max)
_LOG_2PI = math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)
#: Standard deviations of spare gaps :func:`inverted_dropout` draws beyond the expected count.
_SPARE_SD = 8.0


def mlp(in_dim: int, hidden: Sequence[int]) -> nn.Sequential:
    """
    Build a stack of ``Linear -> ReLU`` layers.

    :param in_dim: input width.
    :param hidden: width of each hidden layer (may be empty: the identity).
    :returns: the stack; its output width is ``hidden[-1]`` (``in_dim`` when empty).
    """
    layers: list[nn.Module] = []
    width = in_dim
    for size in hidden:
        layers += [nn.Linear(width, int(size)), nn.ReLU()]
        width = int(size)
    return nn.Sequential(*layers)


def inverted_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """
    Inverted dropout: zero each element with probability ``p``, scale the rest by 1 / (1 - p).

    On the CPU, for the small rates of dropout Q-functions, only the dropped positions are
    drawn: they are the successes of a Bernoulli(p) process over the flattened tensor, whose
    gaps are Geometric(p), so about ``n p`` random numbers replace the ``n`` that
    ``F.dropout`` draws (at p = 0.01 that kernel took 15 % of a CPU learner update; this
    one is 5x faster). Same distribution; other devices and rates use ``F.dropout``.

    :param x: input.
    :param p: drop probability in [0, 1).
    :param training: apply dropout (else return ``x``).
    :returns: ``x`` with dropped elements zeroed and the others scaled.
    """
    if not training or p == 0.0:
        return x
    if x.device.type != 'cpu' or p > 0.1:
        return F.dropout(x, p, True)
    n = x.numel()
    expected = n * p
    # Enough gaps to pass the last element except with probability ~1e-15; extended if not.
    count = max(1, int(expected + _SPARE_SD * math.sqrt(expected) + _SPARE_SD))
    ends = torch.empty(count, dtype=torch.float64).geometric_(p).cumsum_(0)
    while ends[-1] <= n:
        more = torch.empty(count, dtype=torch.float64).geometric_(p).cumsum_(0)
        ends = torch.cat([ends, more.add_(ends[-1])])
    dropped = ends[ends <= n].long().sub_(1)  # 1-based positions of the successes
    mask = torch.full_like(x, 1.0 / (1.0 - p)).view(-1).index_fill_(0, dropped, 0.0)
    return x * mask.view_as(x)


class Actor(nn.Module):
    """
    Tanh-squashed diagonal Gaussian policy.

    :param obs_dim: observation width.
    :param act_dim: action width; actions lie in [-1, 1].
    :param hidden: hidden layer widths of the trunk shared by the mean and log-std heads.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int] = (256, 256)):
        super().__init__()
        self.obs_dim = int(obs_dim)
        self.act_dim = int(act_dim)
        self.hidden = tuple(int(h) for h in hidden)
        self.trunk = mlp(self.obs_dim, self.hidden)
        width = self.hidden[-1] if self.hidden else self.obs_dim
        self.mean_head = nn.Linear(width, self.act_dim)
        self.log_std_head = nn.Linear(width, self.act_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """
        Compute the Gaussian parameters before the tanh squashing.

        The log-std is bounded smoothly to [LOG_STD_MIN, LOG_STD_MAX] with a scaled tanh
        rather than a hard clamp, so its gradient never vanishes at the bounds.

        :param obs: normalized observations, shape ``(B, obs_dim)``.
        :returns: ``(mean, log_std)``, each of shape ``(B, act_dim)``.
        """
        features = self.trunk(obs)
        mean = self.mean_head(features)
        log_std = torch.tanh(self.log_std_head(features))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return mean, log_std

    def sample(self, obs: torch.Tensor, noise: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """
        Draw a reparameterized action and its log-probability.

        :param obs: normalized observations, shape ``(B, obs_dim)``.
        :param noise: standard normal noise of shape ``(B, act_dim)``; drawn when omitted
            (passing it makes the sample reproducible, e.g. compiled against eager).
        :returns: ``(action, log_prob, deterministic_action)``: the squashed sample, its
            log-density of shape ``(B,)`` and ``tanh(mean)``.
        """
        mean, log_std = self(obs)
        if noise is None:
            noise = torch.randn_like(mean)
        pre_tanh = mean + log_std.exp() * noise
        action = torch.tanh(pre_tanh)
        # Gaussian log-density of pre_tanh; (pre_tanh - mean) / std is exactly the noise.
        gaussian = -0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI
        # Change of variables through tanh (Haarnoja et al. 2018, "Soft Actor-Critic
        # Algorithms and Applications", appendix C): log pi(a) = log mu(u) - sum log(1 -
        # tanh(u)^2). log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)) is the same quantity
        # without the cancellation of 1 - tanh(u)^2 when |u| is large.
        log_det = 2.0 * (_LOG_2 - pre_tanh - F.softplus(-2.0 * pre_tanh))
        log_prob = (gaussian - log_det).sum(dim=-1)
        return action, log_prob, torch.tanh(mean)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """
        Return actions without building a graph.

        :param obs: normalized observations, shape ``(B, obs_dim)`` or ``(obs_dim,)``.
        :param deterministic: return ``tanh(mean)`` instead of a sample.
        :returns: actions in [-1, 1] with the leading shape of ``obs``.
        """
        if deterministic:
            return torch.tanh(self(obs)[0])
        return self.sample(obs)[0]

    def deterministic_policy(self, obs_mean: torch.Tensor | None = None,
                             obs_std: torch.Tensor | None = None) -> 'PolicyForExport':
        """
        Copy the deterministic part of the actor into a CPU module that TorchScript accepts.

        :param obs_mean: observation mean subtracted before the network (default 0).
        :param obs_std: observation scale divided out before the network (default 1).
        :returns: a new :class:`PolicyForExport`; later changes to this actor do not reach it
            (send ``actor.state_dict()`` and call :meth:`PolicyForExport.load_actor_state_dict`).
        """
        policy = PolicyForExport(self.obs_dim, self.act_dim, self.hidden)
        policy.load_actor_state_dict(self.state_dict())
        if obs_mean is not None or obs_std is not None:
            policy.set_normalization(obs_mean, obs_std)
        return policy


class PolicyForExport(nn.Module):
    """
    Deterministic policy ``tanh(mean((obs - obs_mean) / obs_std))`` for workers (CPU, no critics).

    Its parameter names are those of :class:`Actor` (less the log-std head), and the
    normalization lives in buffers, so ``state_dict()`` carries everything a worker needs.
    ``torch.jit.script`` and ``torch.jit.trace`` both accept it.

    :param obs_dim: observation width.
    :param act_dim: action width.
    :param hidden: hidden layer widths; must match the actor's.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int] = (256, 256)):
        super().__init__()
        hidden = tuple(int(h) for h in hidden)
        # Its weights are always copied in from an actor, and it is rebuilt at moments set by
        # the wall clock (the doctor's divergence check runs with every metrics report): its
        # random initialization must not draw from the global generator, or a seeded run's
        # dropout and action noise would depend on how fast the machine is.
        with torch.random.fork_rng(devices=[]):
            self.trunk = mlp(obs_dim, hidden)
            self.mean_head = nn.Linear(hidden[-1] if hidden else obs_dim, act_dim)
        self.register_buffer('obs_mean', torch.zeros(obs_dim))
        self.register_buffer('obs_std', torch.ones(obs_dim))
        # Bound on the normalized observation (as a normalizer with clipping applies it). No
        # bound is the largest float32, not inf: every saved weight stays finite, so a
        # checkpoint holding this module (the doctor's reference policy) passes the check
        # that refuses non-finite weights on resume.
        self.register_buffer('obs_clip', torch.tensor(NO_CLIP))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """
        Map raw observations to deterministic actions.

        :param obs: raw observations, shape ``(B, obs_dim)`` or ``(obs_dim,)``.
        :returns: actions in [-1, 1].
        """
        x = (obs - self.obs_mean) / self.obs_std
        x = torch.maximum(torch.minimum(x, self.obs_clip), -self.obs_clip)
        return torch.tanh(self.mean_head(self.trunk(x)))

    def load_actor_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """
        Copy the trunk and mean head from an :class:`Actor` state dict (other keys are ignored).

        :param state: ``actor.state_dict()``; tensors may live on any device.
        """
        own = self.state_dict()
        missing = [k for k in own if k.startswith(('trunk.', 'mean_head.')) and k not in state]
        if missing:
            raise KeyError(f'actor state dict lacks {missing}')
        with torch.no_grad():
            for key, value in own.items():
                if key.startswith(('trunk.', 'mean_head.')):
                    value.copy_(state[key])

    def set_normalization(self, obs_mean: torch.Tensor | None, obs_std: torch.Tensor | None,
                          obs_clip: float | None = None) -> None:
        """
        Set the fixed observation normalization (``None`` leaves a part unchanged).

        :param obs_mean: mean of shape ``(obs_dim,)``.
        :param obs_std: strictly positive scale of shape ``(obs_dim,)``.
        :param obs_clip: bound applied to the normalized observation (:data:`NO_CLIP`: none).
        """
        with torch.no_grad():
            if obs_mean is not None:
                self.obs_mean.copy_(torch.as_tensor(obs_mean, dtype=torch.float32))
            if obs_std is not None:
                std = torch.as_tensor(obs_std, dtype=torch.float32)
                if not bool((std > 0).all()):
                    raise ValueError('obs_std must be strictly positive')
                self.obs_std.copy_(std)
            if obs_clip is not None:
                if not obs_clip > 0:
                    raise ValueError(f'obs_clip must be > 0, got {obs_clip}')
                self.obs_clip.fill_(float(obs_clip))


class EnsembleLinear(nn.Module):
    """
    ``n`` independent linear layers applied as one batched matrix product.

    :param n: number of members.
    :param in_features: input width.
    :param out_features: output width.
    """

    def __init__(self, n: int, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(n, 1, out_features))
        # Same distribution as nn.Linear's default initialization, for every member.
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Apply every member to its own slice of the input.

        :param x: input of shape ``(n, B, in_features)``.
        :returns: output of shape ``(n, B, out_features)``.
        """
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """
    Layer normalization over the features, with a separate gain and bias for each member.

    :param n: number of members.
    :param features: width normalized.
    """

    def __init__(self, n: int, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, 1, features))
        self.bias = nn.Parameter(torch.zeros(n, 1, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize ``x`` of shape ``(n, B, features)`` and apply each member's affine map."""
        return torch.addcmul(self.bias, F.layer_norm(x, x.shape[-1:]), self.weight)


class TwinQ(nn.Module):
    """
    Two independent Q networks evaluated together (clipped double Q, Fujimoto et al. 2018).

    Both MLPs run as one ensemble of batched matrix products: same maths as two separate
    MLPs, half the kernel launches. Each hidden layer is ``Linear -> [Dropout] ->
    [LayerNorm] -> ReLU``: layer normalization bounds the critic's extrapolation and keeps
    high update-to-data ratios stable (Ball et al. 2023, "Efficient Online Reinforcement
    Learning with Offline Data", RLPD); dropout before it is DroQ (Hiraoka et al. 2022,
    "Dropout Q-Functions for Doubly Efficient Reinforcement Learning"). Dropout is active
    while the module is in training mode (SAC keeps its critics there, targets included, as
    DroQ does).

    :param obs_dim: observation width.
    :param act_dim: action width.
    :param hidden: hidden layer widths of each Q network.
    :param layer_norm: normalize every hidden layer.
    :param dropout: dropout probability of every hidden layer (0 = none).
    """

    num_q = 2

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int] = (256, 256),
                 layer_norm: bool = False, dropout: float = 0.0):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f'dropout must lie in [0, 1), got {dropout}')
        widths = [obs_dim + act_dim, *(int(h) for h in hidden)]
        self.layers = nn.ModuleList(
            EnsembleLinear(self.num_q, a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.norms = nn.ModuleList(
            EnsembleLayerNorm(self.num_q, b) for b in widths[1:]) if layer_norm else None
        self.dropout = float(dropout)
        self.out = EnsembleLinear(self.num_q, widths[-1], 1)

    def q_values(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """
        Evaluate both networks.

        :param obs: normalized observations, shape ``(B, obs_dim)``.
        :param action: actions, shape ``(B, act_dim)``.
        :returns: Q values stacked as ``(2, B)``.
        """
        x = torch.cat([obs, action], dim=-1)
        x = x.unsqueeze(0).expand(self.num_q, *x.shape)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            x = inverted_dropout(x, self.dropout, self.training)
            if self.norms is not None:
                x = self.norms[i](x)
            x = F.relu(x)
        return self.out(x).squeeze(-1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """
        Evaluate both networks.

        :param obs: normalized observations, shape ``(B, obs_dim)``.
        :param action: actions, shape ``(B, act_dim)``.
        :returns: ``(q1, q2)``, each of shape ``(B,)``.
        """
        q = self.q_values(obs, action)
        return q[0], q[1]
