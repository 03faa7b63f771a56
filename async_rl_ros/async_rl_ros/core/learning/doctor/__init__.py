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
Training doctor: the troubleshooting table of the design write-up, automated.

Every detector measures one symptom, compares it with a threshold of :class:`DoctorConfig`,
logs a warning that names the measured value and the threshold, records a
:class:`DoctorEvent`, publishes the measurement in :meth:`Doctor.metrics` and -- when
``auto_remedy`` is on -- turns one knob of the learner through the :class:`Knobs` protocol.

Detectors (symptom -> remedy):

* ``non_finite``: NaN/Inf in a batch, a loss or a gradient -> skip the step, restore the last
  good snapshot (:class:`GoodState`);
* ``publish``: NaN/Inf in the weights about to go to workers -> do not publish;
* ``update_ratio``: ``||dtheta|| / ||theta||`` of an update outside
  ``[update_ratio_low, update_ratio_high]`` -> none, a warning only;
* ``reward_scale``: a worker's reward scale differs from the workers' median by more than
  ``reward_scale_factor`` -> none (the worker is misconfigured; a person must look);
* ``policy_divergence``: cosine similarity between the actions of the newest published policy
  and of a worker's policy on the probe batch below ``min_policy_cosine`` ->
  ``scale_policy_regularization(policy_regularization_factor)`` (x1.5);
* ``exploration``: entropy estimate ``mean(-log pi(a|s))`` below ``min_entropy`` ->
  ``scale_temperature(temperature_factor)`` (+10 % exploration);
* ``staleness``: mean parameter-version lag of incoming transitions above ``max_policy_lag``
  -> ``scale_learning_rate(lag_learning_rate_factor)`` (-20 %).

The update ratio and the policy divergence -- the learning dynamics -- are measured and
published from the first update but judged only after ``warmup_updates``: the first Adam steps
are large and a young policy moves fast without anything being wrong. Remedies of one
detector are at least ``remedy_cooldown_steps`` learner updates apart, and the
warnings of one detector at least ``warn_interval_steps`` apart; detections in between are
still counted (``doctor/detections/<detector>``). A remedy is temporary: once its detector has
been quiet for ``remedy_recovery_steps`` updates, the inverse factor undoes it
(:class:`RemedyLedger`, saved in checkpoints with :meth:`Doctor.state_dict`). The doctor's
notion of time is the learner update counter it is given by :meth:`Doctor.begin_step`.

The doctor never does I/O besides the ``logging`` module, and its per-update checks cost one
device synchronisation each.

Layout: :mod:`.checks` (pure NaN/Inf, update-ratio and cosine helpers), :mod:`.state` (the
good-state snapshot, the update-ratio tracker, running reward statistics), :mod:`.interface`
(events, :class:`TrainingDiverged`, the :class:`Knobs` protocol), :mod:`.remedies` (the
remedies in force), :mod:`.record` (counters, events, measurements and the path of a
detection: :class:`DoctorRecord`) and :mod:`.doctor` (the :class:`Doctor`, its detectors);
their public names are re-exported here.
"""

from async_rl_ros.core.config import DoctorConfig
from async_rl_ros.core.learning.doctor.checks import (all_finite, cosine_similarity, finite_rows,
                                                      params_finite, update_ratio)
from async_rl_ros.core.learning.doctor.doctor import Doctor
from async_rl_ros.core.learning.doctor.interface import DoctorEvent, Knobs, TrainingDiverged
from async_rl_ros.core.learning.doctor.record import DoctorRecord
from async_rl_ros.core.learning.doctor.remedies import RemedyLedger
from async_rl_ros.core.learning.doctor.state import GoodState, ParamDeltaTracker, RunningStats

__all__ = [
    'DoctorConfig',
    'DoctorEvent',
    'Knobs',
    'GoodState',
    'RemedyLedger',
    'RunningStats',
    'ParamDeltaTracker',
    'TrainingDiverged',
    'DoctorRecord',
    'Doctor',
    'all_finite',
    'params_finite',
    'finite_rows',
    'update_ratio',
    'cosine_similarity',
]
