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


"""The training doctor of one learner: its detectors (the bookkeeping is :mod:`.record`)."""

from __future__ import annotations

from collections import deque
import logging
import math
import statistics
from typing import Any, Callable, Hashable, Mapping

from async_rl_ros.core.config import DoctorConfig
from async_rl_ros.core.learning.doctor.checks import (_fields, _parameters, _ratio, all_finite,
                                                      ArrayLike, cosine_similarity, Params,
                                                      params_finite)
from async_rl_ros.core.learning.doctor.interface import Knobs, TrainingDiverged
from async_rl_ros.core.learning.doctor.record import DoctorRecord
from async_rl_ros.core.learning.doctor.state import GoodState, RunningStats
import numpy as np
import torch
from torch import nn

_LOG = logging.getLogger(__package__)  # the name it had when the doctor was one module


class Doctor(DoctorRecord):
    """
    Watch one learner and apply the troubleshooting table; see the package docstring.

    :param cfg: thresholds; validated here (which logs the grad-clip warning if due).
    :param knobs: what remedies act on, usually the learner itself; ``None``: report only.
    :param good_state: snapshot used on skipped steps; a fresh one when omitted.
    """

    def __init__(self, cfg: DoctorConfig | None = None, knobs: Knobs | None = None,
                 good_state: GoodState | None = None):
        super().__init__(cfg, knobs)
        self.good_state = good_state if good_state is not None else GoodState()
        self.nan_skips = 0
        self.bad_batches = 0
        self.blocked_publishes = 0
        self.consecutive_skips = 0
        self._ratio_windows: dict[str, deque[float]] = {}  # recent update ratios per network
        self._last_snapshot: int | None = None
        self.reward_stats: dict[Hashable, RunningStats] = {}
        self._probe: Any = None

    def metrics(self) -> dict[str, float]:
        """
        Return the doctor's counters and latest measurements.

        Keys: those of :meth:`DoctorRecord.metrics`, ``doctor/nan_skips``,
        ``doctor/bad_batches``, ``doctor/blocked_publishes`` and, once measured,
        ``doctor/grad_norm``, ``doctor/update_ratio[/<name>]``, ``doctor/min_policy_cosine``,
        ``doctor/entropy``, ``doctor/policy_lag``, ``doctor/policy_lag_max``,
        ``doctor/reward_scale/<worker>``, ``doctor/reward_scale_ratio``.

        :returns: ``{name: value}``.
        """
        out = super().metrics()
        out.update({'doctor/nan_skips': float(self.nan_skips),
                    'doctor/bad_batches': float(self.bad_batches),
                    'doctor/blocked_publishes': float(self.blocked_publishes)})
        scales = self._reward_scales()
        out.update({f'doctor/reward_scale/{w}': s for w, s in scales.items()})
        if len(scales) >= 2:
            ref = self._reference_scale(scales)
            out['doctor/reward_scale_ratio'] = max(_ratio(s, ref) for s in scales.values())
        return out

    # ------------------------------------------------------------------ non-finite values
    def batch_ok(self, batch: Any) -> bool:
        """
        Check a sampled batch for NaN/Inf; on failure the learner skips the step.

        :param batch: a tensor/array or a mapping/dataclass/named tuple/sequence of them.
        :returns: ``True`` when every floating-point field is finite.
        """
        fields = _fields(batch)
        if all_finite(v for _, v in fields):
            return True
        bad = [name for name, v in fields if not all_finite([v])]
        self.bad_batches += 1
        fields_text = ', '.join(bad)
        self._skip('non_finite', f'non-finite values in batch field(s) {fields_text}; '
                   'step skipped', restore=False)
        return False

    def step_passed(self) -> None:
        """Record steps found finite on the device (a CUDA graph), as :meth:`step_ok` would."""
        self.consecutive_skips = 0

    def step_ok(self, losses: Mapping[str, Any] | Any,
                parameters: Params | None = None, grad_norm: float | None = None) -> bool:
        """
        Check losses and gradients before the optimizer step.

        On failure the step must be skipped: the gradients of ``parameters`` are dropped
        (``grad = None``), the good-state snapshot is restored (``restore_on_skip``) and the
        skip is counted.

        :param losses: ``{name: loss}`` (tensors or floats), or a single loss.
        :param parameters: parameters whose ``.grad`` is checked (and dropped on failure).
        :param grad_norm: the total gradient norm, if already measured; when given, the
            gradients are judged by it (a non-finite gradient makes the norm non-finite) and
            not scanned again.
        :returns: ``True`` when the optimizer step may run.
        :raises TrainingDiverged: after more than ``max_consecutive_skips`` skips in a row.
        """
        if not isinstance(losses, Mapping):
            losses = {'loss': losses}
        params = _parameters(parameters) if parameters is not None else []
        grads = [p.grad for p in params if p.grad is not None]
        checks: list[ArrayLike] = [torch.as_tensor(v) for v in losses.values()]
        if grad_norm is not None:
            checks.append(torch.as_tensor(grad_norm))
        else:
            checks.extend(grads)
        if all_finite(checks):
            self.consecutive_skips = 0
            return True
        bad = [k for k, v in losses.items() if not all_finite([torch.as_tensor(v)])]
        what = []
        if bad:
            values = (f'{k}={float(torch.as_tensor(losses[k]).detach().sum()):g}' for k in bad)
            what.append('loss ' + ', '.join(values))
        if grad_norm is not None and not math.isfinite(float(grad_norm)):
            what.append(f'gradient norm {float(grad_norm):g}')
        elif grad_norm is None and not all_finite(grads):
            what.append('gradients')
        for p in params:
            p.grad = None
        what_text = ' and '.join(what) or 'values'
        self._skip('non_finite', f'non-finite {what_text}; step skipped',
                   restore=self.cfg.restore_on_skip)
        return False

    def _skip(self, detector: str, reason: str, restore: bool) -> None:
        self.nan_skips += 1
        self.consecutive_skips += 1
        if restore and self.good_state.has_snapshot:
            self.good_state.restore()
            reason += f', restored the snapshot of step {self.good_state.step}'
        self._detect(detector, reason, float(self.consecutive_skips),
                     float(self.cfg.max_consecutive_skips), key=detector)
        limit = self.cfg.max_consecutive_skips
        if limit and self.consecutive_skips > limit:
            raise TrainingDiverged(f'{self.consecutive_skips} consecutive steps skipped for '
                                   f'non-finite values (max_consecutive_skips = {limit})')

    def remember(self, modules: Mapping[str, nn.Module],
                 optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
                 tensors: Mapping[str, torch.Tensor] | None = None, force: bool = False) -> bool:
        """
        Snapshot the learner state every ``snapshot_interval_steps`` updates, if it is finite.

        :param modules: networks; see :meth:`GoodState.remember`.
        :param optimizers: their optimizers.
        :param tensors: loose tensors (``log_alpha``).
        :param force: snapshot now regardless of the interval.
        :returns: whether a snapshot was taken.
        """
        last = self._last_snapshot
        if not force and last is not None and \
                self.step - last < self.cfg.snapshot_interval_steps:
            return False
        if not (all(params_finite(m) for m in modules.values()) and
                all_finite((tensors or {}).values())):
            _LOG.warning('doctor: step %d: state not finite, snapshot not taken', self.step)
            return False
        self.good_state.remember(modules, optimizers, tensors, step=self.step)
        self._last_snapshot = self.step
        return True

    def publish_ok(self, params: Params) -> bool:
        """
        Check weights before they are published to workers; a NaN must never reach them.

        :param params: the policy module (or its state dict).
        :returns: ``True`` when every parameter and buffer is finite.
        """
        if params_finite(params):
            return True
        self.blocked_publishes += 1
        self._detect('publish', 'non-finite policy weights; not published', 1.0, 0.0)
        return False

    # ------------------------------------------------------------------ gradients, updates
    def update_ratio_due(self) -> bool:
        """Tell whether this update's ratio should be measured (every N updates)."""
        return self.step % self.cfg.update_ratio_interval_steps == 0

    def observe_update_ratio(self, ratio: float | None, name: str = '') -> bool:
        """
        Record an update ratio; compare the mean of the last ``update_ratio_window`` with the band.

        The band is not applied before ``warmup_updates`` (the first Adam steps are large
        against the initial weights); the ratio and its mean are published all along.

        :param ratio: ``||dtheta|| / ||theta||``, e.g. from :class:`ParamDeltaTracker`.
        :param name: network name (``actor``, ``critic``) for the metric and the log.
        :returns: ``True`` when inside the band, during the warm-up, or when ``ratio`` is
            ``None``.
        """
        if ratio is None:
            return True
        self._values['update_ratio'] = ratio
        if name:
            self._values[f'update_ratio/{name}'] = ratio
        window = self._ratio_windows.get(name)
        if window is None or window.maxlen != self.cfg.update_ratio_window:
            window = self._ratio_windows[name] = deque(window or (),
                                                       maxlen=self.cfg.update_ratio_window)
        window.append(float(ratio))
        if len(window) < window.maxlen:
            return True  # too few measurements to call a drift
        mean = statistics.fmean(window)
        self._values['update_ratio_mean' + (f'/{name}' if name else '')] = mean
        low, high = self.cfg.update_ratio_low, self.cfg.update_ratio_high
        if low <= mean <= high or self.step < self.cfg.warmup_updates:
            return True
        side = 'below' if mean < low else 'above'
        label = f'{name} ' if name else ''
        self._detect('update_ratio', f'{label}update ratio ||dtheta||/||theta|| (mean of the last '
                     f'{len(window)}) {side} the healthy band [{low:g}, {high:g}]', mean,
                     low if mean < low else high, key=f'update_ratio:{name}')
        return False

    # ------------------------------------------------------------------ rewards
    def observe_rewards(self, worker_id: Hashable, rewards: ArrayLike) -> bool:
        """
        Add a worker's rewards to its running statistics and compare its scale.

        The scale is the running standard deviation (or mean ``|r|``, see
        ``reward_scale_statistic``). It is compared with the lower median of the scales of all
        workers with at least ``reward_min_samples`` rewards (the median for an odd count; for
        two workers the smaller scale, so the larger one is flagged, as two cannot tell which
        is wrong). The check needs at least two such workers.

        :param worker_id: the worker's id.
        :param rewards: its new rewards.
        :returns: ``False`` when this worker's scale is off by more than
            ``reward_scale_factor``.
        """
        stats = self.reward_stats.setdefault(worker_id, RunningStats())
        stats.update(rewards)
        scales = self._reward_scales()
        if worker_id not in scales or len(scales) < 2:
            return True
        ref = self._reference_scale(scales)
        ratio = _ratio(scales[worker_id], ref)
        if ratio <= self.cfg.reward_scale_factor:
            return True
        stat = self.cfg.reward_scale_statistic
        self._detect('reward_scale', f'worker {worker_id} reward {stat} {scales[worker_id]:.4g} '
                     f'differs from the median worker scale {ref:.4g} by a factor {ratio:.3g}',
                     ratio, self.cfg.reward_scale_factor, key=f'reward_scale:{worker_id}')
        return False

    def _reward_scales(self) -> dict[Hashable, float]:
        use_std = self.cfg.reward_scale_statistic == 'std'
        return {w: (s.std if use_std else s.abs_mean) for w, s in self.reward_stats.items()
                if s.count >= self.cfg.reward_min_samples}

    @staticmethod
    def _reference_scale(scales: Mapping[Hashable, float]) -> float:
        return statistics.median_low(sorted(scales.values()))

    # ------------------------------------------------------------------ policies
    def set_probe(self, obs: ArrayLike) -> None:
        """
        Fix the probe batch of observations the policy versions are compared on.

        :param obs: observations, shape ``(n, obs_dim)``.
        """
        self._probe = obs

    @property
    def probe(self) -> Any:
        """Return the probe observations, or ``None``."""
        return self._probe

    def policy_divergence(self, current: ArrayLike | Callable[[Any], ArrayLike],
                          workers: Mapping[Hashable, ArrayLike | Callable[[Any], ArrayLike]]
                          ) -> dict[Hashable, float]:
        """
        Compare the current policy with the versions the workers act with.

        Use deterministic (mean) actions. Below ``min_policy_cosine`` the remedy raises the
        policy regularization weight by ``policy_regularization_factor``, pulling the learner's
        policy towards the behaviour that generated the data. The cosines are published from
        the start but not judged before ``warmup_updates``: a young policy moves fast between
        versions without anything being wrong.

        :param current: actions of the current policy on the probe, or a callable that maps the
            probe observations to them.
        :param workers: ``{worker_id: actions or callable}`` for each worker's policy version.
        :returns: ``{worker_id: cosine similarity}``.
        """
        def actions(source: Any) -> Any:
            if callable(source):
                if self._probe is None:
                    raise RuntimeError('policy_divergence with callables needs set_probe()')
                with torch.no_grad():
                    return source(self._probe)
            return source

        cur = actions(current)
        cosines = {w: cosine_similarity(cur, actions(a)) for w, a in workers.items()}
        if not cosines:
            return cosines
        worst = min(cosines, key=cosines.get)
        value = cosines[worst]
        self._values['min_policy_cosine'] = value
        threshold = self.cfg.min_policy_cosine
        if value < threshold and self.step >= self.cfg.warmup_updates:
            self._detect('policy_divergence', f'worker {worst} policy diverged from the current '
                         'one (action cosine on the probe batch)', value, threshold,
                         knob='scale_policy_regularization',
                         factor=self.cfg.policy_regularization_factor)
        return cosines

    def observe_entropy(self, entropy: float) -> bool:
        """
        Check the policy entropy estimate ``mean(-log pi(a|s))`` of sampled actions.

        :param entropy: the estimate (nats) of this update.
        :returns: ``False`` when exploration collapsed (below ``min_entropy``).
        """
        entropy = float(entropy)
        self._values['entropy'] = entropy
        if not entropy < self.cfg.min_entropy:
            return True
        self._detect('exploration', 'policy entropy collapsed', entropy, self.cfg.min_entropy,
                     knob='scale_temperature', factor=self.cfg.temperature_factor)
        return False

    def observe_lag(self, lags: ArrayLike) -> bool:
        """
        Check the parameter-version lag of incoming transitions.

        The lag of a transition is the learner's current policy version minus the version the
        worker acted with. The mean over ``lags`` is compared with ``max_policy_lag``.

        :param lags: lags of the transitions just received.
        :returns: ``False`` when the data is too stale.
        """
        if isinstance(lags, torch.Tensor):
            lags = lags.detach().cpu().numpy()
        arr = np.asarray(lags, dtype=np.float64).reshape(-1)
        if arr.size == 0:
            return True
        mean = float(arr.mean())
        self._values['policy_lag'] = mean
        self._values['policy_lag_max'] = float(arr.max())
        if not mean > self.cfg.max_policy_lag:
            return True
        self._detect('staleness', 'transitions too stale (mean policy-version lag)', mean,
                     self.cfg.max_policy_lag, knob='scale_learning_rate',
                     factor=self.cfg.lag_learning_rate_factor)
        return False
