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

"""The evaluator's record in checkpoints: the best snapshots survive a resume, checked."""

from collections import Counter
import dataclasses
import math

from async_rl_ros.core.learning.artifacts import finish_run
from async_rl_ros.core.learning.eval_record import (EVALUATIONS_KEY, pack_evaluations,
                                                    RecordError, unpack_evaluations)
from async_rl_ros.core.learning.evaluation import EpisodeStats, Evaluation
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.loop import TrainingLoop
from async_rl_ros.core.learning.metrics import MetricsLogger
from async_rl_ros.core.learning.resume import resume_learner
from conftest import tiny_config, transitions
import numpy as np
import pytest
import torch

OBS, ACT = 5, 2


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _learner(tmp_path, **flat) -> Learner:
    learner = Learner(tiny_config(tmp_path, **flat), OBS, ACT)
    learner.ingest(transitions(200, np.random.default_rng(0), obs_dim=OBS, act_dim=ACT))
    learner.train_step()  # a learner that learned: finish_run judges none that did not
    return learner


def _snapshot(learner: Learner, version: int, rate: float, env_steps: int,
              final=0.05) -> Evaluation:
    """Return a snapshot with weights of its own (every tensor shifted by its version)."""
    state = learner.policy_state(evaluated=True)
    actor = {k: v + version for k, v in state.actor.items()}
    stats = EpisodeStats(episodes=20, steps=2000, successes=round(20 * rate),
                         returns=[-float(version)] * 20, final_values=[final] * 20,
                         safety=Counter({'speed': version}), seconds=1.5)
    return Evaluation(dataclasses.replace(state, actor=actor, version=version), stats,
                      env_steps)


def _record(loop: TrainingLoop, scored: Evaluation) -> None:
    loop.record_evaluation(scored.state, scored.stats, scored.env_steps)


def test_the_best_snapshots_survive_a_resume_and_can_still_be_exported(tmp_path):
    """A resumed run chooses its export among the best snapshots of its whole length."""
    averaging = {'sac.policy_average_tau': 0.0}  # one actor: no online candidate at the end
    learner = _learner(tmp_path, export_candidates=2, **averaging)
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    snapshots = [_snapshot(learner, 1, 0.30, 100), _snapshot(learner, 2, 0.90, 150, math.nan),
                 _snapshot(learner, 3, 0.50, 180), _snapshot(learner, 4, 0.80, 200)]
    for scored in snapshots:
        _record(loop, scored)
    learner.policy_version = 4
    loop.save_checkpoint()

    resumed = _learner(tmp_path, export_candidates=2, **averaging)
    found = resume_learner(resumed)
    again = TrainingLoop(resumed, None, None, commit_every=1, logger=MetricsLogger())
    note = again.restore_evaluations(found.state)
    assert note.startswith('2 snapshots evaluated before the checkpoint stay export candidates')
    assert '(best: 90 % at 150 env steps)' in note
    # The two best, oldest first, with their weights, statistics and env steps.
    assert [(s.state.version, s.env_steps) for s in again.evaluations] == [(2, 150), (4, 200)]
    for kept in again.evaluations:
        original = snapshots[kept.state.version - 1]
        for name, tensor in original.state.actor.items():
            assert torch.equal(kept.state.actor[name], tensor)
        np.testing.assert_array_equal(kept.state.obs_std, original.state.obs_std)
        assert kept.stats.ranking() == original.stats.ranking()
        np.testing.assert_array_equal(kept.stats.final_values, original.stats.final_values)
        assert (kept.stats.returns, kept.stats.safety, kept.stats.steps) == (
            original.stats.returns, original.stats.safety, original.stats.steps)
    # After the resume the policy gets worse; the snapshot from before it is still exported.
    _record(again, _snapshot(resumed, 5, 0.40, 300))
    calls = []

    def evaluate(state, split):
        calls.append((state.version, split))
        return EpisodeStats(episodes=100, successes=90 if state.version == 2 else 30)

    resumed.policy_version = 6
    run = finish_run(again, tmp_path / 'run', title='test', evaluate=evaluate)
    assert calls == [(6, 'evaluator'), (2, 'selection'), (4, 'selection'), (6, 'selection'),
                     (2, 'held_out')]
    assert run.summary['exported_policy_version'] == 2
    obs = torch.ones(3, OBS)
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.load(str(run.policy))(obs),
                                   resumed.policy_from_state(snapshots[1].state)(obs))


def test_the_last_policy_scored_at_the_end_of_a_run_is_a_candidate_after_a_resume(tmp_path):
    """The final checkpoint is written again once the last policy's score joins the best."""
    averaging = {'sac.policy_average_tau': 0.0}  # one actor: no online candidate at the end
    learner = _learner(tmp_path, export_candidates=2, **averaging)
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    _record(loop, _snapshot(learner, 1, 0.10, 100))
    learner.policy_version = 3

    def evaluate(state, split):  # the last policy (version 3) is the best one
        return EpisodeStats(episodes=20, successes=18 if state.version == 3 else 2)

    finish_run(loop, tmp_path / 'run', title='test', evaluate=evaluate)
    resumed = _learner(tmp_path, export_candidates=2, **averaging)
    again = TrainingLoop(resumed, None, None, commit_every=1, logger=MetricsLogger())
    note = again.restore_evaluations(resume_learner(resumed).state)
    assert note.startswith('2 snapshots evaluated before the checkpoint'), note
    assert '(best: 90 % at 200 env steps)' in note, note
    assert [s.state.version for s in again.evaluations] == [1, 3]


def test_snapshots_scored_without_per_episode_figures_survive_a_resume(tmp_path):
    """
    An evaluator may keep counts only (``EpisodeStats`` lists empty); they reload too.

    An empty numpy array pickles as a call of ``bytes()``, which ``torch.load(weights_only=
    True)`` refuses: such a record made its checkpoint unreadable, and ``--resume`` skipped it.
    """
    learner = _learner(tmp_path)
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    state = dataclasses.replace(learner.policy_state(evaluated=True), version=12)
    loop.record_evaluation(state, EpisodeStats(episodes=20, successes=17), env_steps=0)
    loop.save_checkpoint()
    resumed = _learner(tmp_path)
    found = resume_learner(resumed)
    assert found.skipped == []
    again = TrainingLoop(resumed, None, None, commit_every=1, logger=MetricsLogger())
    assert again.restore_evaluations(found.state) == (
        'the snapshot evaluated before the checkpoint stays an export candidate (best: 85 % at '
        '0 env steps)')
    kept = again.evaluations[0]
    assert (kept.state.version, kept.stats.successes, kept.stats.returns) == (12, 17, [])


def test_a_checkpoint_without_a_record_resumes_with_none(tmp_path):
    learner = _learner(tmp_path)
    learner.save_checkpoint()  # as checkpoints were written before the record
    resumed = _learner(tmp_path)
    found = resume_learner(resumed)
    loop = TrainingLoop(resumed, None, None, commit_every=1, logger=MetricsLogger())
    assert loop.restore_evaluations(found.state).startswith('no evaluated snapshots in the')
    assert loop.evaluations == []


def _packed(tmp_path):
    learner = _learner(tmp_path)
    record = pack_evaluations([_snapshot(learner, 1, 0.5, 100), _snapshot(learner, 2, 0.6, 200)])
    return learner, record


def _set(path: str | tuple, value):
    """Return a change of the record at ``path`` (dotted, or a tuple of keys)."""
    def change(record):
        target = record
        keys = path.split('.') if isinstance(path, str) else path
        for key in keys[:-1]:
            target = target[int(key)] if str(key).isdigit() else target[key]
        if value is KeyError:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
        return record
    return change


ACTOR_NAME = 'trunk.0.weight'


@pytest.mark.parametrize('change, message', [
    (lambda r: {'a': r}, 'evaluations: a list expected, got dict'),
    (lambda r: r * 51, 'evaluations: 102 entries, at most 100'),
    (_set('0.version', '3'), 'evaluations[0].version: an integer expected, got str'),
    (_set('1.env_steps', 10_000), 'evaluations[1].env_steps: 10000, allowed 0 to 200'),
    (_set('0.extra', 1), 'evaluations[0]: unknown entry extra'),
    (_set('0.stats', KeyError), 'evaluations[0]: stats missing'),
    (_set((0, 'actor', ACTOR_NAME), torch.zeros(3, 3)),
     f'evaluations[0].actor.{ACTOR_NAME}: shape (3, 3), expected'),
    (_set((1, 'actor', ACTOR_NAME), torch.zeros(32, OBS, dtype=torch.int64)),
     f'evaluations[1].actor.{ACTOR_NAME}: a floating-point tensor expected'),
    (_set('0.obs_std', np.zeros(OBS, np.float32)), 'evaluations[0].obs_std: must be > 0'),
    (_set('0.obs_mean', np.zeros(OBS + 1, np.float32)),
     'evaluations[0].obs_mean: shape (6,), expected (5,)'),
    (_set('1.stats.successes', 30), 'evaluations[1].stats.successes: 30, allowed 0 to 20'),
    (_set('1.stats.episodes', 0), 'evaluations[1].stats.episodes: 0, allowed 1 to'),
    (_set('0.stats.returns', [math.inf] * 20),
     'evaluations[0].stats.returns: non-finite values'),
    (_set('0.stats.final_values', [0.0] * 3),
     'evaluations[0].stats.final_values: a list of 20 numbers (or none) expected'),
    (_set('0.stats.returns', np.zeros(20)),
     'evaluations[0].stats.returns: a list of 20 numbers (or none) expected'),
    (_set('0.stats.seconds', math.nan), 'evaluations[0].stats.seconds: a finite number >= 0'),
    (_set('0.stats.rank.lower_is_better', 'yes'),
     'evaluations[0].stats.rank.lower_is_better: true or false expected'),
])
def test_a_record_that_does_not_fit_is_refused_naming_the_field(tmp_path, change, message):
    learner, record = _packed(tmp_path)
    actor = learner.sac.evaluated_actor.state_dict()
    assert ACTOR_NAME in actor
    assert len(unpack_evaluations(record, actor, OBS, 200)) == 2  # as written: it fits
    with pytest.raises(RecordError) as err:
        unpack_evaluations(change(record), actor, OBS, 200)
    assert str(err.value).startswith(message)


def test_a_record_that_does_not_fit_is_dropped_whole_and_training_goes_on(tmp_path):
    learner, record = _packed(tmp_path)
    record[1]['stats']['successes'] = 21
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    learner.env_steps = 200
    note = loop.restore_evaluations({EVALUATIONS_KEY: record})
    assert note == ('evaluated snapshots of the checkpoint dropped (evaluations[1].stats.'
                    'successes: 21, allowed 0 to 20): the export is chosen among those scored '
                    'from now on')
    assert loop.evaluations == []
