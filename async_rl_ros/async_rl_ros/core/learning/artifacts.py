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
What a training run leaves behind, written the same way by every runner.

Under ``learner.log_dir``: the final checkpoint, ``policy.pt`` (the best evaluated policy as
TorchScript, with its observation normalization and a manifest naming its task and widths:
:mod:`async_rl_ros.core.policy_file`), ``learning_curve.png`` and ``summary.json``
(the end-of-run table as data). Every file is written to a temporary name and renamed, so a
reader never sees half of one.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from async_rl_ros.core.learning.evaluation import EpisodeStats, Evaluation, EvaluationStopped
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.loop import TrainingLoop
from async_rl_ros.core.learning.metrics import plot_learning_curve
from async_rl_ros.core.learning.run_folder import write_whole
from async_rl_ros.core.policy_file import PolicyManifest, save_policy_file
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.tasks import FINAL_DISTANCE, RankMetric
import torch

__all__ = ['RunResult', 'export_policy', 'write_json', 'finish_run', 'select_export',
           'evaluation_summary']


@dataclasses.dataclass
class RunResult:
    """What a training run produced."""

    summary: dict[str, Any]
    checkpoint: str
    policy: Path
    curve: Path
    summary_path: Path
    log_dir: Path
    #: the exported policy's evaluation on held-out episodes (``None``: none ran)
    evaluation: EpisodeStats | None = None

    @property
    def interrupted(self) -> bool:
        """Return whether the run stopped before its budget."""
        return bool(self.summary.get('interrupted'))


def export_policy(learner: Learner, best: Evaluation | None, path: Path) -> Path:
    """
    Write a deterministic policy as TorchScript with its manifest (atomically).

    :param learner: supplies the architecture and the task (a learner built without a task
        name writes no manifest) and, if ``best`` is None, the current policy to export (the
        averaged actor when averaging is on).
    :param best: the evaluated policy to export, e.g. the best one.
    :param path: the ``.pt`` file.
    """
    if best is None:
        policy = learner.export_policy(evaluated=True)
        version, env_steps = learner.policy_version, learner.env_steps
    else:
        policy = learner.policy_from_state(best.state)
        version, env_steps = best.state.version, best.env_steps
    manifest = None if not learner.task else PolicyManifest(
        task=learner.task, obs_dim=learner.obs_dim, act_dim=learner.act_dim,
        policy_version=int(version), env_steps=int(env_steps))
    scripted = torch.jit.script(policy)
    return write_whole(path, lambda tmp: save_policy_file(scripted, tmp, manifest))


def write_json(path: Path, data: Mapping[str, Any]) -> Path:
    """Write ``data`` as indented JSON (atomically); non-finite numbers become null."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in data.items()}
    text = json.dumps(clean, indent=2, sort_keys=True) + '\n'
    return write_whole(path, lambda tmp: tmp.write_text(text, encoding='utf-8'))


def evaluation_summary(stats: EpisodeStats) -> dict[str, Any]:
    """Return an evaluation's figures for ``summary.json``."""
    return {'eval_episodes': stats.episodes, 'eval_success_rate': stats.success_rate,
            stats.rank.summary_key: stats.mean_final,
            'eval_return_mean': (sum(stats.returns) / len(stats.returns)
                                 if stats.returns else math.nan),
            'eval_safety_interventions': stats.intervention_rates}


def finish_run(loop: TrainingLoop, log_dir: Path, *, title: str,
               evaluate: Callable[[PolicyState, str], EpisodeStats] | None = None,
               extra: Mapping[str, Any] | None = None,
               rank: RankMetric = FINAL_DISTANCE, skip_evaluation: str = '') -> RunResult:
    """
    Write the final checkpoint, ``policy.pt``, the learning curve and ``summary.json``.

    The checkpoint is written before anything is scored (a stop during the final evaluation
    still leaves it), and again when the last policy's score joins the evaluator's best, so
    a resumed run keeps that policy as an export candidate too.

    The current policy is scored on the evaluator's episodes like every snapshot was, so a late
    collapse does not overwrite a good policy. The best of many scores is partly luck, so the
    ``learner.export_candidates`` best-scored snapshots and the last policy are scored again
    on episodes of their own (``'selection'``) and the best of them is exported
    (:func:`select_export`). With an averaged actor (``sac.policy_average_tau > 0``) the last
    online actor competes too: while a task still improves, the average trails it (push, five
    runs of 200,000 env steps: online 63 of 100 held out on average, averaged 59). The
    exported policy is then judged on held-out episodes, which chose nothing: the ``eval_*``
    figures of the summary.

    :param loop: the loop that trained (its learner, counters and evaluations).
    :param log_dir: where the files go.
    :param title: title of the learning curve.
    :param evaluate: ``evaluate(state, split)`` runs deterministic episodes of ``split``:
        ``'evaluator'``, ``'selection'`` or ``'held_out'`` (see
        :func:`~async_rl_ros.core.workers.inline.final_evaluation`); ``None``: no final
        evaluation (ROS learner without an env).
    :param extra: more summary entries (transport figures, the mode, interruptions ...).
    :param rank: the task's rank metric, the learning curve's third panel.
    :param skip_evaluation: why the final evaluation is skipped (a stop signal: the process
        must be gone within seconds, and a hundred episodes take a minute), said in the
        summary as ``final_evaluation``; the best policy scored during the run is exported.
        An evaluation that ``evaluate`` ends with :class:`EvaluationStopped` (a stop request
        arrived while it ran) is cut short the same way: the export is the best policy scored
        so far, chosen on the selection episodes when they were all run. A run that made no
        update (stopped, or failed, before its first) is not evaluated: its policy is the
        initial one.
    """
    learner = loop.learner
    checkpoint = loop.save_checkpoint()
    scored: list[Evaluation] = []
    best, candidates, held_out = None, [], None
    if not skip_evaluation and learner.updates == 0:  # its initial weights: nothing to judge
        skip_evaluation = (f'no update was made (the first waits for {learner.start_size} '
                           'stored transitions)')
    note = f'skipped: {skip_evaluation}' if skip_evaluation else ''
    if evaluate is not None and not skip_evaluation:
        try:
            scored = _score_last(loop, evaluate)
            if scored and any(e is scored[0] for e in loop.top_evaluations(
                    learner.cfg.export_candidates)):
                # Written again: the record a resume restores now holds the last policy's score.
                checkpoint = loop.save_checkpoint()
            best, candidates = select_export(loop, evaluate, learner.cfg.export_candidates,
                                             scored)
            held_out = evaluate(best.state, 'held_out') if best else None
        except EvaluationStopped as exc:
            note = f'cut short: {exc}'
    last = scored[0].stats if scored else None
    best = best or loop.best_evaluation
    policy = export_policy(learner, best, log_dir / 'policy.pt')
    curve = plot_learning_curve(loop.logger.history, log_dir / 'learning_curve.png',
                                title=title, rank=rank)
    summary: dict[str, Any] = dict(loop.totals())
    summary['hidden_sizes'] = [int(h) for h in learner.cfg.sac.hidden_sizes]  # actor, critics
    if held_out is not None:
        summary.update(evaluation_summary(held_out))
    if note:
        summary['final_evaluation'] = note
    if last is not None:
        summary['last_policy_success_rate'] = last.success_rate
    if best is not None:
        summary.update({'exported_policy_version': best.state.version,
                        'exported_policy_success_rate': best.stats.success_rate,
                        'exported_policy_env_steps': best.env_steps,
                        'exported_policy_actor': 'online' if best.online else 'evaluated'})
    if candidates:
        summary['export_candidates'] = candidates
    summary.update(extra or {})
    summary.update({'checkpoint': checkpoint, 'policy': str(policy),
                    'learning_curve': str(curve)})
    path = write_json(log_dir / 'summary.json', summary)
    loop.logger.close()
    return RunResult(summary=summary, checkpoint=checkpoint, policy=policy, curve=curve,
                     summary_path=path, log_dir=log_dir, evaluation=held_out)


def _score_last(loop: TrainingLoop, evaluate: Callable[[PolicyState, str], EpisodeStats]
                ) -> list[Evaluation]:
    """
    Score the last policy on the evaluator's episodes, its online actor too where it competes.

    The evaluated actor joins the evaluator's record; the online actor is scored alike but kept
    out of it.

    :returns: the last policy's evaluation first; none before the first update.
    """
    learner = loop.learner
    current = learner.policy_state(evaluated=True)
    if current is None:
        return []
    scored = [loop.record_evaluation(current, evaluate(current, 'evaluator'))]
    if learner.sac.actor_average is not None and learner.cfg.export_candidates > 1:
        online = learner.policy_state()
        scored.append(Evaluation(online, evaluate(online, 'evaluator'), learner.env_steps,
                                 online=True))
    return scored


def select_export(loop: TrainingLoop, evaluate: Callable[[PolicyState, str], EpisodeStats],
                  count: int, also: Sequence[Evaluation | None] = ()
                  ) -> tuple[Evaluation | None, list[dict[str, Any]]]:
    """
    Choose the policy to export: the best of the top-scored snapshots on fresh episodes.

    The evaluator's best score is the maximum of many noisy ones (20 episodes each, every
    ``eval_every`` env steps), and that maximum overrates its snapshot: the winner's curse.
    The ``count`` best-scored snapshots and ``also`` (the last policy) are scored again on the
    ``'selection'`` episodes; the highest success rate wins, ties go to the task's rank
    metric, then to the evaluator's order. ``count`` 1 keeps the best evaluator score (the
    last policy's included) and scores nothing again.

    :param also: evaluations that are candidates whatever they scored (the last policy, and
        its online actor where the evaluated one is averaged); ``None`` entries are skipped.
    :returns: the chosen evaluation (its evaluator score kept) and, when more than one
        candidate ran, one row per candidate for the summary.
    """
    if count < 2:
        return loop.best_evaluation, []
    ranked = loop.top_evaluations(count)
    for extra in also:
        if extra is not None and all((s.state.version, s.online) != (
                extra.state.version, extra.online) for s in ranked):
            ranked.append(extra)
    if len(ranked) < 2:
        return (ranked[0] if ranked else None), []
    rows, chosen, chosen_key = [], None, None
    for scored in ranked:
        stats = evaluate(scored.state, 'selection')
        rows.append({'version': scored.state.version, 'online_actor': scored.online,
                     'env_steps': scored.env_steps,
                     'evaluator_success_rate': scored.stats.success_rate,
                     'selection_success_rate': stats.success_rate,
                     'selection_final_' + stats.rank.key: (
                         stats.mean_final if math.isfinite(stats.mean_final) else None)})
        key = stats.ranking()
        if chosen_key is None or key > chosen_key:
            chosen, chosen_key = scored, key
    return chosen, rows
