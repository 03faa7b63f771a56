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
The long benches' results file: every finished run is kept, a later invocation reuses it.

One JSON line per finished run, ``{"job": key, "result": ...}``, appended as the run ends;
a bench stopped part way (a session that ends, Ctrl-C) loses no finished run, and a run in
progress that keeps its marks (:func:`unfinished_folder`) goes on from its last one. A run
is reused only when its whole key matches: the bench's settings and a digest of the shipped
defaults it trained with (:func:`settings_digest`), so a result measured under other defaults
is run again, never reported as a figure of the settings that ship. A module of the benches,
not a bench (its name starts with ``_``).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Callable

__all__ = ['default_path', 'find', 'load', 'save', 'settings_digest', 'unfinished_folder']


def default_path(bench: str, task: str, quick: bool, suffix: str = '.jsonl') -> str:
    """
    Return ``runs/bench/<bench>_<task>[_quick]<suffix>``, under the working directory.

    Beside the trainer's run folders (``learner.log_dir``, ``runs/async_rl``), not in
    ``/tmp``: many systems empty ``/tmp`` at a reboot, which would lose the finished runs and
    the checkpoints a long bench resumes from.
    """
    slug = ''.join(c if c.isalnum() or c in '-_' else '_' for c in task)
    return os.path.join('runs', 'bench', f'{bench}_{slug}{"_quick" if quick else ""}{suffix}')


def settings_digest(*sections: Any) -> str:
    """Return a digest of config sections (``to_flat()``), in order; ``None`` ones skipped."""
    flat = [s.to_flat() for s in sections if s is not None]
    return hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:16]


def unfinished_folder(path: str, key: dict) -> str | None:
    """
    Return the folder that keeps the run of ``key`` while it is unfinished (``_unfinished``).

    Beside the results file: ``<path>.unfinished/<impl>_seed<seed>_<digest of key>``; the
    digest covers the whole key, so a run under other settings never resumes from it.
    ``None`` when ``path`` is ``''`` (nothing is kept).
    """
    if not path:
        return None
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    name = f'{key.get("impl", "run")}_seed{key.get("seed", "")}_{digest}'
    return os.path.join(os.path.abspath(path) + '.unfinished', name)


def load(path: str, decode: Callable[[dict], dict] | None = None) -> list[dict]:
    """
    Return the ``{'job': key, 'result': ...}`` records of ``path`` (none if absent or ``''``).

    :param decode: applied to each result (JSON turned its int keys into strings).
    """
    if not path or not os.path.exists(path):
        return []
    records = []
    with open(path, encoding='utf-8') as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a killed run
                continue
            if not isinstance(record, dict) or not isinstance(record.get('result'), dict):
                continue
            if decode is not None:
                record['result'] = decode(record['result'])
            records.append(record)
    return records


def find(records: list[dict], key: dict) -> dict | None:
    """Return the latest result stored under ``key`` (a run done again replaces), or ``None``."""
    return next((r['result'] for r in reversed(records) if r.get('job') == key), None)


def save(path: str, key: dict, result: dict) -> None:
    """Append one finished run (nothing if ``path`` is ``''``)."""
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'a', encoding='utf-8') as f:
        f.write(json.dumps({'job': key, 'result': result}) + '\n')
