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
How ``bench/sample_efficiency.py`` scores its runs and sums them up: the keys of its JSON line.

A run's ``curve`` maps evaluation marks (env steps) to the deterministic policy's success rate.
From it come the env steps (and training seconds) to the first mark at >= 90 % (``TARGET``,
the key the learners are compared on) and at >= 95 % (``REACHED``), and whether every mark from
the first 95 % on stays >= 90 % (``KEPT``). Medians count a run that never got there as
infinite, so a median is ``None`` when half the runs or more did not get there. The baseline
the summary compares against is the one with the lower median to 90 %.
"""

from __future__ import annotations

import math
import statistics

__all__ = ['BASELINES', 'IMPLS', 'NAMES', 'TARGET', 'print_table', 'score', 'summarize']

REACHED, KEPT = 0.95, 0.90
TARGET = 0.90  # the success rate the cross-learner keys count env steps to
IMPLS = ('ours', 'sac_her', 'tqc_her', 'sac')
BASELINES = ('sac_her', 'tqc_her')
NAMES = {'ours': 'async_rl_ros', 'sac_her': 'SB3 SAC+HER', 'tqc_her': 'TQC+HER',
         'sac': 'SB3 SAC'}


def score(result: dict) -> dict:
    """Add the steps and seconds to 90 % and 95 % and whether the run stays >= 90 %."""
    curve = result['curve']
    first = _first_reaching(curve, REACHED)
    result['steps_to_95'] = first
    result['seconds_to_95'] = result['seconds'][first] if first is not None else None
    result['stays_90'] = _stays(curve, first)
    first90 = _first_reaching(curve, TARGET)
    result['steps_to_90'] = first90
    result['seconds_to_90'] = result['seconds'][first90] if first90 is not None else None
    online = result.get('online_curve')
    if online:
        first_online = _first_reaching(online, REACHED)
        result['online_steps_to_95'] = first_online
        result['online_stays_90'] = _stays(online, first_online)
    return result


def _first_reaching(curve: dict, level: float) -> int | None:
    """Return the first mark at >= ``level``, or ``None``."""
    return next((m for m in sorted(curve) if curve[m] >= level), None)


def _stays(curve: dict, first: int | None) -> bool:
    """Tell whether every mark from the first at >= 95 % on stays >= 90 %."""
    return first is not None and all(curve[m] >= KEPT for m in curve if m >= first)


def _median(values) -> float | None:
    """Median counting a run that never got there as infinite; ``None`` if that is the median."""
    values = list(values)
    if not values:
        return None
    med = statistics.median([math.inf if v is None else v for v in values])
    return None if math.isinf(med) else med


def _better_baseline(results: list[dict]) -> str | None:
    """Return the baseline with the lower median env steps to 90 % (ties: higher last mark)."""
    def score(key: str) -> tuple:
        runs = [r for r in results if r['key'] == key]
        med = _median(r['steps_to_90'] for r in runs)
        last = [r['curve'][max(r['curve'])] for r in runs if r['curve']]
        return (math.inf if med is None else med, -statistics.mean(last) if last else 0.0)

    keys = [k for k in BASELINES if any(r['key'] == k for r in results)]
    keys = keys or [k for k in ('sac',) if any(r['key'] == k for r in results)]
    return min(keys, key=score) if keys else None


def _at_or_before(curve: dict, step: float) -> float | None:
    marks = [m for m in curve if m <= step]
    return curve[max(marks)] if marks else None


def summarize(results: list[dict], args, eval_episodes: int) -> dict:
    """Return the JSON summary of the finished runs."""
    ours = [r for r in results if r['key'] == 'ours']
    best = _better_baseline(results)
    base = [r for r in results if r['key'] == best]
    ours90 = _median(r['steps_to_90'] for r in ours)
    base90 = _median(r['steps_to_90'] for r in base)
    at_20k = [r['curve'][20_000] for r in ours if 20_000 in r['curve']]
    # Where a baseline still below 90 % stood at twice this learner's steps.
    twice = ([_at_or_before(r['curve'], 2 * ours90) for r in base] if ours90 else [])
    twice = [v for v in twice if v is not None]
    return {
        'task': args.task,
        'env_steps': args.steps,
        'baseline_env_steps': args.baseline_steps or args.steps,
        'eval_episodes': eval_episodes,
        'seeds': args.seeds,
        'env_steps_to_90_median': ours90,
        'seeds_reaching_90': sum(r['steps_to_90'] is not None for r in ours),
        'baseline_env_steps_to_90_median': base90,
        'baseline': NAMES.get(best) if best else None,
        'ratio_vs_baseline': (round(ours90 / base90, 3) if ours90 and base90 else None),
        'baseline_success_at_twice_ours_median': (statistics.median(twice) if twice else None),
        'baselines_env_steps_to_90_median': {
            NAMES[k]: _median(r['steps_to_90'] for r in results if r['key'] == k)
            for k in IMPLS[1:] if any(r['key'] == k for r in results)},
        'env_steps_to_95_median': _median(r['steps_to_95'] for r in ours) if ours else None,
        'seeds_reaching_95': sum(r['steps_to_95'] is not None for r in ours),
        'seeds_staying_90': sum(r['stays_90'] for r in ours),
        'online_actor_seeds_staying_90': (sum(r['online_stays_90'] for r in ours)
                                          if ours and ours[0].get('online_curve') else None),
        'seconds_to_90_median': _median(r['seconds_to_90'] for r in ours) if ours else None,
        'baseline_seconds_to_90_median': _median(r['seconds_to_90'] for r in base),
        'success_rate_at_20k_min': min(at_20k) if at_20k else None,
    }


def print_table(results: list[dict], marks: list[int], args, eval_episodes: int) -> None:
    """Print one row per run (and one per online actor) at up to ten of the marks."""
    print(f'\n{args.task}: single-process runs, {args.steps} env steps (baselines '
          f'{args.baseline_steps or args.steps}), seeds {args.seeds}')
    print(f'deterministic success rate ({eval_episodes} episodes) at env steps; first step at '
          f'>= {TARGET:.0%} and >= {REACHED:.0%}, training seconds to {TARGET:.0%}, and whether '
          f'later marks stay >= {KEPT:.0%}')
    every = max(1, len(marks) // 10)
    shown = marks[every - 1::every] if len(marks) > 10 else marks
    header = (f'{"learner":<14}{"seed":>5}' + ''.join(f'{m:>8}' for m in shown)
              + f'{"to 90%":>9}{"to 95%":>9}{"s":>7}{"stays":>7}{"steps/s":>8}{"upd/s":>7}')
    print(header)
    print('-' * len(header))
    for r in results:
        print(f'{r["impl"]:<14}{r["seed"]:>5}'
              + ''.join(f'{r["curve"][m]:>8.2f}' if m in r['curve'] else f'{"-":>8}'
                        for m in shown)
              + f'{str(r["steps_to_90"]):>9}{str(r["steps_to_95"]):>9}'
              + (f'{r["seconds_to_90"]:>7.0f}' if r['seconds_to_90'] is not None
                 else f'{"-":>7}')
              + f'{"yes" if r["stays_90"] else "no":>7}{r["steps_per_s"]:>8.1f}'
              + f'{r["updates_per_s"]:>7.0f}')
        if r.get('online_curve'):
            print(f'{"  online actor":<19}'
                  + ''.join(f'{r["online_curve"][m]:>8.2f}' if m in r['online_curve']
                            else f'{"-":>8}' for m in shown)
                  + f'{"-":>9}{str(r["online_steps_to_95"]):>9}{"-":>7}'
                  + f'{"yes" if r["online_stays_90"] else "no":>7}')
