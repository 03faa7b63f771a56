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
An unfinished run of a long bench, kept at its last evaluation mark so a stopped bench goes on.

A push run takes hours and a session can end in the middle of one. At every mark the run
writes what it needs to go on (the learner's checkpoint with its replay buffer, or the
baseline's model, replay buffer and normaliser) and what it has measured so far (the marks'
success rates and seconds) into ``<folder>/mark_<env steps>/``. The folder is written under a
temporary name and renamed when complete, so a bench killed while writing finds the previous
mark intact. A later invocation of the bench resumes the run at its newest mark; the run's
result then lists the marks it was resumed at (``resumed_at``): a resumed run is the same
learner on the same data, but its exploration noise and the episode in progress start over.
The folder goes once the run's result is in the results file. A module of the benches, not a
bench (its name starts with ``_``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import shutil
from typing import Callable

__all__ = ['Unfinished']

_PREFIX = 'mark_'
_RECORD = 'record.json'


class Unfinished:
    """The newest mark of one run: a folder of state and its ``record.json``."""

    def __init__(self, folder: str | os.PathLike | None):
        """:param folder: where this run's marks go; ``None``: keep nothing (and find none)."""
        self.folder = Path(folder) if folder is not None else None

    def _marks(self) -> list[tuple[int, Path]]:
        if self.folder is None or not self.folder.is_dir():
            return []
        found = []
        for path in self.folder.iterdir():
            step = path.name[len(_PREFIX):]
            if path.name.startswith(_PREFIX) and step.isdigit() and (path / _RECORD).is_file():
                found.append((int(step), path))
        return sorted(found)

    def newest(self) -> tuple[Path, dict] | None:
        """Return the newest complete mark's folder and record, or ``None``."""
        for _, path in reversed(self._marks()):
            try:
                record = json.loads((path / _RECORD).read_text(encoding='utf-8'))
            except (OSError, ValueError):  # unreadable: try the mark before
                continue
            if isinstance(record, dict):
                return path, record
        return None

    def save(self, mark: int, record: dict, write: Callable[[Path], None]) -> None:
        """
        Keep the run at ``mark``: ``write(folder)`` stores its state, then ``record`` is added.

        :param mark: the env steps of the mark (names the folder).
        :param record: what the run measured so far (JSON).
        :param write: stores the state to go on from into the folder it is given.
        """
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / f'{_PREFIX}{int(mark):012d}'
        for stale in self.folder.glob(f'.{_PREFIX}*.tmp'):  # left by a run killed writing
            shutil.rmtree(stale, ignore_errors=True)
        tmp = self.folder / f'.{final.name}.{os.getpid()}.tmp'
        tmp.mkdir()
        try:
            write(tmp)
            with open(tmp / _RECORD, 'w', encoding='utf-8') as f:
                json.dump(record, f)
                f.flush()
                os.fsync(f.fileno())
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for step, path in self._marks():  # the older marks are not needed any more
            if step < mark:
                shutil.rmtree(path, ignore_errors=True)

    def clear(self) -> None:
        """Remove the run's folder (its result is stored)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
