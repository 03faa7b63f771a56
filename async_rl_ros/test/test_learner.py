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

"""The learner: ingest, update, policy hand-out, checkpoints, single-process training."""

import dataclasses

from async_rl_ros.core.learning.evaluation import EpisodeTracker
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.metrics import MetricsLogger, plot_learning_curve
from async_rl_ros.core.learning.resume import replay_note, resume_learner
from async_rl_ros.core.learning.single_process import train_single_process
from async_rl_ros.core.learning.step_guard import FiniteGuard
from async_rl_ros.core.learning.update_graph import replay_in_python, UpdateGraphs
from async_rl_ros.core.workers.inline import PolicyEvaluator
from conftest import scripted_loop, tiny_config, transitions
import numpy as np
import pytest
import torch

OBS, ACT = 5, 2


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_ingest_normalizes_and_drops_non_finite_rows(tmp_path):
    learner = Learner(tiny_config(tmp_path), OBS, ACT)
    batch = transitions(100, np.random.default_rng(0))
    batch['reward'][3] = np.nan
    batch['obs'][7, 1] = np.inf
    assert learner.ingest(batch) == 98
    assert learner.rejected_rows == 2 and len(learner.replay) == 98
    assert learner.metrics()['doctor/rejected_rows'] == 2
    np.testing.assert_allclose(learner.normalizer.mean, 1.0, atol=0.8)


def test_recorded_transitions_fill_the_replay_but_are_no_env_steps(tmp_path):
    """A warm start: updates may begin at once, and the workers are not held back."""
    from async_rl_ros.core.learning.loop import TrainingLoop

    learner = Learner(tiny_config(tmp_path, learning_starts=500, rate_limit_slack=200), OBS, ACT)
    recorded = transitions(600, np.random.default_rng(3), worker=1, version=1300)
    recorded['reward'][5] = np.nan
    assert learner.ingest(recorded, recorded=True) == 599
    assert (learner.env_steps, learner.recorded_steps, len(learner.replay)) == (0, 599, 599)
    assert learner.metrics()['charts/recorded_steps'] == 599
    # acted by no policy of this run (like warm-up actions): the doctor sees no lag
    assert set(learner.replay.storage.policy_version[:599].tolist()) == {-1}
    doctor = learner.doctor.metrics()
    assert 'doctor/policy_lag' not in doctor and 'doctor/reward_scale/1' not in doctor
    np.testing.assert_allclose(learner.normalizer.mean, 1.0, atol=0.8)
    assert learner.ready()
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    loop.source = type('Live', (), {'blocking': False})()
    assert loop.owes_update() and learner.ready_at == (0, 0)
    # The workers may step at once: their slack, then one transition per update (the rate
    # limit counts from the moment the replay was ready, here before any step of this run).
    assert learner.env_steps_wanted(200) == 200
    for _ in range(3):
        learner.train_step()
    assert learner.env_steps_wanted(200) == 203
    assert learner.ingest(transitions(10, np.random.default_rng(4))) == 10
    assert (learner.env_steps, learner.recorded_steps) == (10, 599)


def test_an_idle_loop_waits_on_its_source_not_on_a_clock(tmp_path):
    """Owing no update, the loop blocks in its source until a batch is ready."""
    from async_rl_ros.core.learning.loop import IDLE_WAIT_S, TrainingLoop

    class Idle:
        blocking = False

        def __init__(self):
            self.waits = []

        def take(self):
            return []

        def wait(self, timeout):
            self.waits.append(timeout)

        def maintain(self, learner):
            pass

    learner = Learner(tiny_config(tmp_path, learning_starts=500), OBS, ACT)
    source = Idle()
    loop = TrainingLoop(learner, source, None, commit_every=1, logger=MetricsLogger())
    loop.step()
    assert source.waits == [IDLE_WAIT_S] and learner.updates == 0


def test_training_ends_with_the_batch_that_reaches_the_budget_and_counts_it_whole(tmp_path):
    """Every step a worker took is counted: a run ends up to one batch per worker past it."""
    from async_rl_ros.core.learning.loop import Received

    learner = Learner(tiny_config(tmp_path, total_env_steps=100, **{'sac.hidden_sizes': [8]}),
                      OBS, ACT)
    rng, delivered = np.random.default_rng(0), []

    def take():  # two workers, 24 transitions each
        delivered.append(48)
        return [Received(transitions(24, rng, worker=w), w) for w in (0, 1)]

    scripted_loop(learner, take).run()
    assert learner.env_steps == sum(delivered) == 144  # the third take passed 100
    assert len(learner.replay) == 144


def test_train_step_updates_sac_and_priorities(tmp_path):
    learner = Learner(tiny_config(tmp_path), OBS, ACT)
    learner.ingest(transitions(500, np.random.default_rng(1)))
    assert learner.ready()
    before = learner.replay.sampler.max_td
    metrics = {}
    for _ in range(20):
        metrics = learner.train_step()
    for name in ('losses/qf1_loss', 'losses/qf2_loss', 'losses/actor_loss', 'losses/alpha',
                 'losses/entropy', 'charts/batch_size', 'replay/mean_weight'):
        assert np.isfinite(metrics[name]), name
    assert learner.updates == 20 and learner.sac.num_updates == 20
    assert metrics['charts/batch_size'] == 64
    counts = learner.replay.sampler.counts
    assert counts.sum() == 20 * 64  # every draw counted (count-aware priorities)
    assert learner.replay.sampler.max_td != before or before > 0


def test_the_learner_takes_the_graphed_update_with_the_doctor_as_its_guard(tmp_path):
    """
    The doctor guards SAC as a FiniteGuard, so a CUDA learner replays graphs.

    On the CPU the graph is "recorded" as a Python call; the two learners must stay equal,
    through a poisoned critic too (the doctor counts and acts on the skips as eagerly).
    """
    learners = []
    for _ in range(2):
        learner = Learner(tiny_config(tmp_path), OBS, ACT)
        learner.ingest(transitions(500, np.random.default_rng(1)))
        learners.append(learner)
    eager, graphed = learners
    assert isinstance(graphed.sac.guard, FiniteGuard)
    sac = graphed.sac
    sac.graphs = UpdateGraphs(sac.device, sac._graph_state, sac._graph_settings,
                              recorder=replay_in_python)
    for step in range(8):
        if step == 5:  # a poisoned critic step: reach the guard past the batch check
            for learner in learners:
                learner.sac.critic.out.bias.data.fill_(float('inf'))
        results = []
        for learner in learners:
            torch.manual_seed(step)
            results.append(learner.train_step())
        assert results[0].keys() == results[1].keys()
        np.testing.assert_allclose([results[1][k] for k in results[0]], list(results[0].values()),
                                   rtol=1e-5, atol=1e-6, err_msg=f'step {step}')
        if step == 5:
            for learner in learners:
                with torch.no_grad():
                    learner.sac.critic.out.bias.data.zero_()
    assert sac.graphs.captures >= 1
    assert graphed.doctor.nan_skips == eager.doctor.nan_skips >= 1
    for a, b in zip(eager.sac.actor.parameters(), graphed.sac.actor.parameters()):
        torch.testing.assert_close(b, a)


def test_metric_names_are_known_before_the_first_update(tmp_path):
    learner = Learner(tiny_config(tmp_path), OBS, ACT)
    names = learner.metric_names()
    assert len(names) == len(set(names))
    assert {'losses/qf1_loss', 'losses/actor_loss', 'losses/alpha', 'charts/batch_size',
            'charts/env_steps'} <= set(names)
    learner.ingest(transitions(500, np.random.default_rng(4)))
    for _ in range(3):
        assert set(learner.train_step()) <= set(names)


def test_policy_state_and_export_act_like_the_learner(tmp_path):
    learner = Learner(tiny_config(tmp_path), OBS, ACT)
    learner.ingest(transitions(300, np.random.default_rng(2)))
    for _ in range(5):
        learner.train_step()
    state = learner.policy_state()
    assert state.check(OBS) is state and state.version == learner.policy_version
    policy = torch.jit.script(learner.export_policy())
    obs = np.random.default_rng(3).normal(size=OBS).astype(np.float32) * 3.0 + 1.0
    expected = learner.act(obs, deterministic=True)
    got = policy(torch.as_tensor(obs)).detach().numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_non_finite_weights_are_never_handed_out(tmp_path):
    learner = Learner(tiny_config(tmp_path), OBS, ACT)
    with torch.no_grad():
        next(learner.sac.actor.parameters())[0, 0] = float('nan')
    assert learner.policy_state() is None


def test_checkpoint_resume_restores_everything(tmp_path):
    cfg = tiny_config(tmp_path, **{'checkpoint.save_replay_buffer': True})
    learner = Learner(cfg, OBS, ACT)
    learner.ingest(transitions(300, np.random.default_rng(4)))
    for _ in range(10):
        learner.train_step()
    learner.policy_version = 7
    learner.save_checkpoint()
    restored = Learner(cfg, OBS, ACT)
    assert resume_learner(restored).path is not None
    assert (restored.updates, restored.policy_version, restored.env_steps) == (10, 7, 300)
    assert len(restored.replay) == 300
    assert replay_note(restored) == 'replay buffer restored: 300 transitions'
    obs = np.ones(OBS, dtype=np.float32)
    np.testing.assert_array_equal(restored.act(obs, True), learner.act(obs, True))
    assert restored.sac.actor_average is not None  # the shipped default averages the actor
    for ours, theirs in zip(restored.sac.actor_average.parameters(),
                            learner.sac.actor_average.parameters()):
        assert torch.equal(ours, theirs)
    # Both continue identically: same sampling RNG, same weights, same optimizer state.
    torch.manual_seed(0)
    a = learner.train_step()
    torch.manual_seed(0)
    b = restored.train_step()
    assert a['losses/qf1_loss'] == pytest.approx(b['losses/qf1_loss'], rel=1e-5)


def test_a_resume_without_the_replay_buffer_says_so_and_waits_for_new_data(tmp_path):
    cfg = tiny_config(tmp_path)  # the shipped default: checkpoints without the replay buffer
    assert not cfg.checkpoint.save_replay_buffer
    learner = Learner(cfg, OBS, ACT)
    learner.ingest(transitions(300, np.random.default_rng(5)))
    for _ in range(3):
        learner.train_step()
    learner.save_checkpoint()
    restored = Learner(cfg, OBS, ACT)
    resume_learner(restored)
    assert restored.env_steps == 300 and len(restored.replay) == 0
    wait = restored.start_size
    assert wait == max(cfg.learning_starts, restored.batch_sizer.batch_size)
    assert replay_note(restored) == (
        'replay buffer empty: the checkpoint holds none (learner.checkpoint.save_replay_buffer '
        f'keeps it); updates resume once it holds {wait} transitions again')
    # What the line promises: no update until the buffer holds that much again.
    restored.ingest(transitions(wait - 1, np.random.default_rng(6)))
    assert not restored.ready()
    restored.ingest(transitions(1, np.random.default_rng(7)))
    assert restored.ready()


def test_a_doctor_remedy_survives_a_resume_and_is_undone_once_the_symptom_is_gone(tmp_path):
    cfg = tiny_config(tmp_path, **{'doctor.max_policy_lag': 2.0,
                                   'doctor.remedy_recovery_steps': 5})
    learner = Learner(cfg, OBS, ACT)
    learner.policy_version = 10
    learner.ingest(transitions(300, np.random.default_rng(6), version=0))  # lag 10: too stale
    configured = cfg.sac.actor_lr

    def lr(run: Learner) -> float:
        return run.sac.actor_optimizer.param_groups[0]['lr']

    assert lr(learner) == pytest.approx(0.8 * configured)
    learner.save_checkpoint()
    restored = Learner(cfg, OBS, ACT)
    assert resume_learner(restored).path is not None
    assert lr(restored) == pytest.approx(0.8 * configured)
    assert restored.doctor.metrics()['doctor/remedies_in_force'] == 1.0
    fresh = transitions(300, np.random.default_rng(7), version=restored.policy_version)
    restored.ingest(fresh)  # the data is fresh again
    for _ in range(5):
        restored.train_step()
    assert lr(restored) == pytest.approx(0.8 * configured)  # quiet for 4 updates only
    restored.train_step()
    assert lr(restored) == pytest.approx(configured)
    metrics = restored.metrics()
    assert metrics['doctor/remedies_undone'] == 1.0 and metrics['doctor/remedies_in_force'] == 0


def test_episode_tracker_emits_episode_metrics():
    tracker, out = EpisodeTracker(window=2), []
    for k in range(6):
        tracker.step(1.0, k % 3 == 2, {'is_success': k == 2, 'distance': 0.01}, out.append)
    assert [m['charts/episodic_return'] for m in out] == [3.0, 3.0]
    assert out[-1]['charts/success_rate'] == 0.5


def test_single_process_training_learns_the_reach_task_a_little(tmp_path):
    """A short run must move the flange closer to targets than random actions do."""
    from async_rl_ros.envs.reach_env import make_reach_env
    cfg = tiny_config(tmp_path, **{'sac.hidden_sizes': [64, 64], 'learning_starts': 500,
                                   'warmup_steps': 500, 'batch.initial_batch': 128,
                                   'eval_every': 1500})
    env, eval_env = make_reach_env(), make_reach_env()
    learner = Learner(cfg, env.observation_space.shape[0], env.action_space.shape[0])
    logger = MetricsLogger(tmp_path / 'tb')
    loop = train_single_process(learner, env, 3000, logger=logger,
                                evaluator=PolicyEvaluator(eval_env, (64, 64), 5))
    logger.close()
    ratio = cfg.updates_per_step  # updates per transition once the replay holds enough
    assert learner.env_steps == 3000
    updates0, steps0 = learner.ready_at
    assert ratio * (3000 - steps0) <= learner.updates - updates0 <= ratio * (3000 - steps0 + 1)
    assert [e.env_steps for e in loop.evaluations] == [1500, 3000]  # every eval_every steps
    best = max(loop.evaluations, key=lambda e: e.stats.success_rate)
    assert loop.best_evaluation.stats.success_rate == best.stats.success_rate
    assert list((tmp_path / 'tb').glob('events.out.tfevents.*'))
    returns = [v for _, v in logger.history['charts/episodic_return']]
    assert len(returns) == 30
    assert np.mean(returns[-5:]) > np.mean(returns[:5])  # the first 5 are random warm-up
    png = plot_learning_curve(logger.history, tmp_path / 'curve.png', 'reach')
    assert png.stat().st_size > 10_000
    # The worker acted with what the shards served: int8 keyframes and deltas on them.
    received = loop.source.receiver
    assert received.version == loop.published == learner.policy_version
    assert received.delta_packets > 3 * received.full_packets > 0
    assert received.rejected == 0
    summary = loop.source.summary()
    assert summary['weights_policies_received'] == loop.source.policies > 1000
    assert summary['weights_reduction'] > 0.5


def test_policy_divergence_of_worker_versions_raises_regularization(tmp_path):
    cfg = tiny_config(tmp_path, **{'doctor.min_policy_cosine': 0.99, 'doctor.warmup_updates': 0,
                                   'doctor.remedy_cooldown_steps': 1})
    learner = Learner(cfg, OBS, ACT)
    learner.ingest(transitions(300, np.random.default_rng(5)))
    assert learner.doctor.probe is not None and len(learner.doctor.probe) == 256
    old = learner.policy_state()
    learner.published(old, 0)
    assert learner.check_policy_divergence({0: old.version}) == {0: pytest.approx(1.0)}
    assert learner.sac.policy_reg_weight == 0.0
    with torch.no_grad():  # a very different current policy
        for p in learner.sac.actor.parameters():
            p.add_(torch.randn_like(p))
    # Not yet served: no worker could act with it, so no worker lags behind it.
    assert learner.check_policy_divergence({0: old.version}) == {0: pytest.approx(1.0)}
    assert learner.sac.policy_reg_weight == 0.0
    learner.published(learner.policy_state(), 1)  # served: worker 0 now acts with a stale one
    cosines = learner.check_policy_divergence({0: old.version, 1: 99})
    assert set(cosines) == {0} and cosines[0] < 0.99
    assert learner.sac.policy_reg_weight > 0.0
    assert learner.doctor.metrics()['doctor/min_policy_cosine'] == pytest.approx(cosines[0])
    assert learner.check_policy_divergence({0: 1}) == {0: pytest.approx(1.0)}


def test_a_lockstep_round_of_updates_is_not_a_diverged_worker(tmp_path):
    """
    A sync worker acts with the round's policy while the learner updates past it.

    The updates of a round are unpublished, so the worker holds the newest policy there is:
    the doctor must not pull the actor back towards it, however far the round moved.
    """
    cfg = tiny_config(tmp_path, **{'doctor.min_policy_cosine': 0.999,
                                   'doctor.warmup_updates': 0,
                                   'doctor.remedy_cooldown_steps': 1})
    learner = Learner(cfg, OBS, ACT)
    learner.ingest(transitions(300, np.random.default_rng(6)))
    learner.published(learner.policy_state(), 0)
    before = learner.export_policy()
    probe = torch.as_tensor(learner.doctor.probe)
    for _ in range(128):  # one round of two updates per transition of a 64-transition batch
        learner.train_step()
    with torch.no_grad():
        moved = 1.0 - torch.nn.functional.cosine_similarity(
            learner.export_policy()(probe).flatten(), before(probe).flatten(), dim=0).item()
    assert moved > 1e-3  # the round's updates moved the actor beyond the threshold
    assert learner.check_policy_divergence({0: 0}) == {0: pytest.approx(1.0)}
    assert learner.sac.policy_reg_weight == 0.0
    assert learner.doctor.detections['policy_divergence'] == 0


def test_the_averaged_actor_is_evaluated_and_exported_while_workers_act_online(tmp_path):
    """With ``sac.policy_average_tau`` the evaluator and the export see the averaged actor."""
    from async_rl_ros.core.learning.artifacts import finish_run
    from async_rl_ros.core.learning.evaluation import EpisodeStats
    from async_rl_ros.envs.reach_env import make_reach_env

    def weights(module):
        return {k: v.detach().clone() for k, v in module.state_dict().items()}

    def equal(a, b):
        return all(torch.equal(a[k], b[k]) for k in a)

    class Recorder:
        """An evaluator that checks what it is handed against the learner's two actors."""

        def __init__(self):
            self.scored = []

        def submit(self, state):
            self.scored.append((state.version, equal(state.actor, weights(average)),
                                equal(state.actor, weights(learner.sac.actor))))
            return True

        def poll(self):
            return [(v, EpisodeStats(episodes=2, successes=1)) for v, *_ in self.scored[-1:]]

    cfg = tiny_config(tmp_path, **{'sac.policy_average_tau': 0.05, 'eval_every': 150,
                                   'learning_starts': 100})
    env = make_reach_env()
    learner = Learner(cfg, env.observation_space.shape[0], env.action_space.shape[0])
    average = learner.sac.actor_average
    recorder = Recorder()
    loop = train_single_process(learner, env, 400, evaluator=recorder)
    assert len(recorder.scored) >= 2
    assert all(is_average and not is_online for _, is_average, is_online in recorder.scored)
    # The worker acted with the online actor the shards served.
    online = learner.policy_state()
    assert equal(online.actor, weights(learner.sac.actor))
    assert not equal(online.actor, weights(average))
    assert loop.source.receiver.version == loop.published == learner.policy_version
    finals = []

    def evaluate(state, split):
        finals.append((split, equal(state.actor, weights(average))))
        return EpisodeStats(episodes=1, successes=1)

    run = finish_run(loop, tmp_path / 'run', title='test', evaluate=evaluate)
    # The current policy is the averaged one; it ties the snapshots and, newest, wins.
    assert finals[0] == ('evaluator', True) and finals[-1] == ('held_out', True)
    obs = torch.as_tensor(env.reset(seed=3)[0], dtype=torch.float32)
    exported = torch.jit.load(str(run.policy))(obs)
    expected = learner.export_policy(evaluated=True)(obs)
    torch.testing.assert_close(exported, expected)
    assert not torch.allclose(exported, learner.export_policy()(obs))


def test_the_best_evaluated_policy_is_exported_and_judged_on_held_out_episodes(tmp_path):
    """A late collapse does not overwrite the good policy; its figures are held-out ones."""
    from collections import Counter
    import json

    from async_rl_ros.core.learning.artifacts import finish_run
    from async_rl_ros.core.learning.evaluation import EpisodeStats
    from async_rl_ros.core.learning.loop import TrainingLoop

    # One actor (no average): the last online actor is no candidate of its own.
    learner = Learner(tiny_config(tmp_path, **{'sac.policy_average_tau': 0.0}), OBS, ACT)
    rng = np.random.default_rng(0)
    learner.ingest(transitions(200, rng))
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    good = learner.policy_state()
    loop.record_evaluation(good, EpisodeStats(episodes=10, successes=9), env_steps=100)
    for _ in range(20):  # the policy moves on (and, say, collapses)
        learner.train_step()
    calls = []

    def evaluate(state, split):
        calls.append((state.version, split))
        last = state.version != good.version  # the current policy: 2 of 10
        return EpisodeStats(episodes=10, steps=1000, successes=2 if last else 8,
                            safety=Counter({'accel': 50, 'speed': 2}))

    learner.policy_version = good.version + 1  # the current policy is a newer version
    run = finish_run(loop, tmp_path / 'run', title='test', evaluate=evaluate)
    assert calls == [(good.version + 1, 'evaluator'), (good.version, 'selection'),
                     (good.version + 1, 'selection'), (good.version, 'held_out')]
    summary = json.loads(run.summary_path.read_text())
    assert summary['exported_policy_version'] == good.version
    assert summary['exported_policy_success_rate'] == 0.9
    assert summary['eval_success_rate'] == 0.8 == run.evaluation.success_rate  # held out
    assert summary['last_policy_success_rate'] == 0.2
    # How often the safety filter had to change the exported policy's commands, per reason.
    assert summary['eval_safety_interventions'] == {'accel': 0.05, 'speed': 0.002}
    assert dict(run.evaluation.rows())['safety interventions'] == (
        'accel 5.0 % of steps, speed 0.2 % of steps')
    exported = torch.jit.load(str(run.policy))
    obs = torch.as_tensor(rng.normal(size=(5, OBS)), dtype=torch.float32)
    reference = learner.policy_from_state(good)
    with torch.no_grad():
        torch.testing.assert_close(exported(obs), reference(obs))


def test_the_export_is_chosen_on_fresh_episodes_not_by_the_luckiest_score(tmp_path):
    """
    The evaluator's best score is a maximum of noisy ones, so it does not choose alone.

    The top snapshots and the last policy are scored again on selection episodes, and the best
    there is exported and judged.
    """
    import json

    from async_rl_ros.core.learning.artifacts import finish_run
    from async_rl_ros.core.learning.evaluation import EpisodeStats
    from async_rl_ros.core.learning.loop import TrainingLoop

    cfg = tiny_config(tmp_path, export_candidates=2, **{'sac.policy_average_tau': 0.0})
    learner = Learner(cfg, OBS, ACT)
    learner.ingest(transitions(200, np.random.default_rng(0)))
    learner.train_step()  # a learner that learned: finish_run judges none that did not
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    # Evaluator scores (of 20 episodes) and what each policy really does (selection episodes).
    evaluator = {1: 0.30, 2: 0.55, 3: 0.50, 4: 0.20}
    true_rate = {1: 0.30, 2: 0.25, 3: 0.60, 4: 0.45, 5: 0.50}
    for version, rate in evaluator.items():
        state = dataclasses.replace(learner.policy_state(), version=version)
        loop.record_evaluation(state, EpisodeStats(episodes=20, successes=round(20 * rate)),
                               env_steps=1000 * version)
    calls = []

    def evaluate(state, split):
        calls.append((state.version, split))
        rate = 0.10 if split == 'evaluator' else true_rate[state.version]
        return EpisodeStats(episodes=100, successes=round(100 * rate))

    learner.policy_version = 5  # the last policy: 0.10 on the evaluator's episodes
    run = finish_run(loop, tmp_path / 'run', title='test', evaluate=evaluate)
    # The two best scores (versions 2, 3) and the last policy (5) are scored again.
    assert calls == [(5, 'evaluator'), (2, 'selection'), (3, 'selection'), (5, 'selection'),
                     (3, 'held_out')]
    summary = json.loads(run.summary_path.read_text())
    assert summary['exported_policy_version'] == 3
    assert summary['exported_policy_success_rate'] == 0.5   # the evaluator's score
    assert summary['eval_success_rate'] == 0.6              # held out
    assert [(c['version'], c['selection_success_rate']) for c in summary['export_candidates']
            ] == [(2, 0.25), (3, 0.6), (5, 0.5)]


def test_the_last_online_actor_competes_with_the_averaged_one(tmp_path):
    """While a task still improves the average trails the online actor, so both compete."""
    import json

    from async_rl_ros.core.learning.artifacts import finish_run
    from async_rl_ros.core.learning.evaluation import EpisodeStats
    from async_rl_ros.core.learning.loop import TrainingLoop

    learner = Learner(tiny_config(tmp_path, export_candidates=2), OBS, ACT)
    assert learner.sac.actor_average is not None  # the shipped weight averaging
    learner.ingest(transitions(300, np.random.default_rng(0)))
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    snapshot = dataclasses.replace(learner.policy_state(evaluated=True), version=1)
    loop.record_evaluation(snapshot, EpisodeStats(episodes=20, successes=12), env_steps=100)
    for _ in range(30):  # the online actor moves ahead of its average
        learner.train_step()
    learner.policy_version = 2
    online = learner.policy_state()
    calls = []

    def evaluate(state, split):
        is_online = all(torch.equal(state.actor[k], v) for k, v in online.actor.items())
        calls.append(('online' if is_online else state.version, split))
        return EpisodeStats(episodes=100, successes=90 if is_online else 50)

    run = finish_run(loop, tmp_path / 'run', title='test', evaluate=evaluate)
    assert calls == [(2, 'evaluator'), ('online', 'evaluator'), (1, 'selection'),
                     (2, 'selection'), ('online', 'selection'), ('online', 'held_out')]
    summary = json.loads(run.summary_path.read_text())
    assert summary['exported_policy_actor'] == 'online'
    assert summary['exported_policy_version'] == 2 and summary['eval_success_rate'] == 0.9
    assert [(c['version'], c['online_actor']) for c in summary['export_candidates']] == [
        (1, False), (2, False), (2, True)]
    # The online actor is not one of the evaluator's snapshots (nor of a checkpoint's record).
    assert [s.online for s in loop.evaluations] == [False, False]
    obs = torch.ones(3, OBS)
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.load(str(run.policy))(obs),
                                   learner.policy_from_state(online)(obs))


def test_one_export_candidate_exports_the_best_score_as_it_is(tmp_path):
    from async_rl_ros.core.learning.artifacts import finish_run
    from async_rl_ros.core.learning.evaluation import EpisodeStats
    from async_rl_ros.core.learning.loop import TrainingLoop

    learner = Learner(tiny_config(tmp_path, export_candidates=1), OBS, ACT)
    learner.ingest(transitions(200, np.random.default_rng(0)))
    learner.train_step()  # a learner that learned: finish_run judges none that did not
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    best = dataclasses.replace(learner.policy_state(), version=7)
    loop.record_evaluation(best, EpisodeStats(episodes=20, successes=20), env_steps=100)
    calls = []

    def evaluate(state, split):
        calls.append((state.version, split))
        return EpisodeStats(episodes=20, successes=10)

    learner.policy_version = 8
    run = finish_run(loop, tmp_path / 'run', title='test', evaluate=evaluate)
    # The last policy still competes with the best score, but nothing is scored again.
    assert calls == [(8, 'evaluator'), (7, 'held_out')]
    assert 'export_candidates' not in run.summary
    assert run.summary['exported_policy_version'] == 7


def test_the_final_evaluation_scores_like_the_evaluator_and_judges_on_more_episodes(tmp_path):
    """The last policy is scored as every snapshot was; the held-out judge has its own count."""
    from async_rl_ros.core.workers.inline import final_evaluation
    from async_rl_ros.envs.reach_env import make_reach_env

    env = make_reach_env()
    try:
        cfg = tiny_config(tmp_path, eval_episodes=2, final_eval_episodes=3)
        learner = Learner(cfg, env.observation_space.shape[0], env.action_space.shape[0])
        evaluate = final_evaluation(env, cfg)
        state = learner.policy_state()
        assert evaluate(state, 'evaluator').episodes == 2   # learner.eval_episodes
        assert evaluate(state, 'selection').episodes == 3   # learner.final_eval_episodes
        assert evaluate(state, 'held_out').episodes == 3
    finally:
        env.close()


def test_a_seeded_run_does_not_depend_on_how_often_metrics_are_reported(tmp_path):
    """
    Reports run on the wall clock; the doctor's divergence check in each rebuilds policies.

    Rebuilding them must not draw from torch's global generator, which the updates' dropout
    and action noise use: the same seed gives the same weights at any reporting rate.
    """
    from async_rl_ros.envs.reach_env import make_reach_env

    def train(stats_interval_s: float, name: str) -> Learner:
        cfg = tiny_config(tmp_path / name, learning_starts=100)
        env = make_reach_env()
        learner = Learner(cfg, env.observation_space.shape[0], env.action_space.shape[0])
        loop = train_single_process(learner, env, 300, stats_interval_s=stats_interval_s)
        env.close()
        if stats_interval_s == 0.0:
            assert loop.cosines  # the divergence check ran, with every step
        return learner

    often, never = train(0.0, 'often'), train(1e9, 'never')
    assert often.updates == never.updates > 0
    for a, b in zip(often.sac.actor.parameters(), never.sac.actor.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(often.sac.critic.parameters(), never.sac.critic.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
