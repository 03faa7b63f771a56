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
Metric sinks: TensorBoard event files, an in-memory history and the learning-curve PNG.

A run folder also keeps ``metrics.jsonl``, every scalar as it was logged, which a resumed run
reloads so its curve and summary cover the whole run.
"""

from __future__ import annotations

from collections import defaultdict
import json
import math
from pathlib import Path
import time
from typing import Any, Mapping

from async_rl_ros.core.learning.run_folder import write_whole
from async_rl_ros.core.tasks import FINAL_DISTANCE, RankMetric

__all__ = ['MetricsLogger', 'plot_learning_curve', 'RECORD']

RECORD = 'metrics.jsonl'  # a run folder's record of every scalar
RECORD_FLUSH_S = 5.0      # s between two flushes of the record


class MetricsLogger:
    """
    Write scalar metrics to TensorBoard (``torch.utils.tensorboard``) and keep a history.

    :param log_dir: directory of the event files; ``None`` keeps the history only.
    """

    def __init__(self, log_dir: str | Path | None = None):
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.history: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self._writer = None
        self._record: Any = None  # the run's metrics.jsonl, see record_to()
        self._flushed = 0.0
        if self.log_dir is not None:
            from torch.utils.tensorboard import SummaryWriter
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._writer = SummaryWriter(str(self.log_dir))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record every finite scalar of ``metrics`` at ``step`` (env steps)."""
        for name, value in metrics.items():
            value = float(value)
            if not math.isfinite(value):
                continue
            self.history[name].append((int(step), value))
            if self._writer is not None:
                self._writer.add_scalar(name, value, int(step))
            if self._record is not None:
                self._record.write(json.dumps([int(step), name, value]) + '\n')
        if self._record is not None and time.monotonic() - self._flushed > RECORD_FLUSH_S:
            self._record.flush()
            self._flushed = time.monotonic()

    def record_to(self, path: str | Path, until_step: int | None = None) -> int:
        """
        Append every scalar logged from now on to ``path`` (JSON lines ``[step, name, value]``).

        A resumed run first reloads what the file holds up to ``until_step`` (the checkpoint
        it resumed from; later lines belong to the part that was lost) into the history, so
        its learning curve and summary cover the whole run. A line cut short by a kill is
        skipped.

        :param path: the run's ``metrics.jsonl``.
        :param until_step: the env steps resumed at; ``None``: a new run.
        :returns: how many values were reloaded.
        """
        path = Path(path)
        kept: list[str] = []
        if until_step is not None and path.is_file():
            for line in path.read_text(encoding='utf-8', errors='replace').splitlines():
                try:
                    step, name, value = json.loads(line)
                    step, value = int(step), float(value)
                except (ValueError, TypeError):
                    continue
                if step <= until_step and isinstance(name, str) and math.isfinite(value):
                    self.history[name].append((step, value))
                    kept.append(line)
            for points in self.history.values():
                points.sort(key=lambda p: p[0])  # reloaded before anything logged since
        text = ''.join(line + '\n' for line in kept)
        write_whole(path, lambda tmp: tmp.write_text(text, encoding='utf-8'))
        self._record = open(path, 'a', encoding='utf-8')  # noqa: SIM115 -- closed in close()
        self._flushed = time.monotonic()
        return len(kept)

    def last(self, name: str, default: float = math.nan) -> float:
        """Return the newest value of a metric."""
        values = self.history.get(name)
        return values[-1][1] if values else default

    def close(self) -> None:
        """Flush and close the event files."""
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None
        if self._record is not None:
            self._record.close()
            self._record = None


def _smoothed(points: list[tuple[int, float]], window: int = 50
              ) -> tuple[list[int], list[float]]:
    """
    Return one point per distinct env step: the mean of the last ``window`` values.

    Episodes that arrive in one batch share an env step; plotting them raw draws a vertical
    line at that step. Averaging over the last ``window`` episodes reads like a rate.
    """
    steps: list[int] = []
    values: list[float] = []
    recent: list[float] = []
    for step, value in points:
        recent.append(value)
        del recent[:-window]
        mean = sum(recent) / len(recent)
        if steps and steps[-1] == step:
            values[-1] = mean
        else:
            steps.append(step)
            values.append(mean)
    return steps, values


def plot_learning_curve(history: Mapping[str, list[tuple[int, float]]], path: str | Path,
                        title: str, rank: RankMetric = FINAL_DISTANCE) -> Path:
    """
    Save a PNG of success rate, episodic return and the rank metric against env steps.

    :param history: ``MetricsLogger.history``: training episodes (``charts/*``, smoothed
        over the last 50 episodes) and the evaluator's scores (``eval/*``, as points).
    :param path: where to write the PNG.
    :param title: the figure's title (task, mode, seed).
    :param rank: the task's rank metric (``charts/final_<key>``), the third panel.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    # 300000 steps as '300k': whole numbers of six digits run into each other on the axis
    thousands = FuncFormatter(lambda x, _: f'{x / 1000:g}k' if abs(x) >= 1000 else f'{x:g}')
    panels = [('success_rate', 'success rate', (0.0, 1.02)),
              ('episodic_return', 'episodic return', None),
              (f'final_{rank.key}', rank.label + (f' ({rank.unit})' if rank.unit else ''),
               None)]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (name, label, ylim) in zip(axes, panels):
        raw = 'episode_success' if name == 'success_rate' else name
        steps, values = _smoothed(history.get(f'charts/{raw}', []))
        if steps:
            ax.plot(steps, values, '-', label='training episodes (smoothed)', alpha=0.8)
        points = history.get(f'eval/{name}', [])
        if points:
            ax.plot(*zip(*points), 'o', label='evaluations (fixed seeds)', markersize=4)
        ax.set_xlabel('env steps')
        ax.xaxis.set_major_formatter(thousands)
        ax.set_ylabel(label)
        if ylim:
            ax.set_ylim(*ylim)
        ax.grid(alpha=0.3)
        if steps or points:
            ax.legend(loc='best', fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
