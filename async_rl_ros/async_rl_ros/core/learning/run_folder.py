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
Run folders: every training run writes into a folder of its own, locked while it runs.

``learner.log_dir`` is the root of the runs. A new run makes ``<root>/<YYYYmmdd-HHMMSS>/``
(``-2``, ``-3`` ... when two start in the same second) and points ``<root>/latest`` at it; its
checkpoints go to ``<run>/checkpoints`` unless ``learner.checkpoint.directory`` names another
folder. ``--resume`` continues ``latest`` or a run named by its folder, in that folder: the
run's curve and summary then cover the whole run, and nothing of another run is touched.
A new run refused before it wrote anything (a folder it cannot use, a setting only its
start can check) leaves no folder, and ``latest`` still names the run before it
(:meth:`RunFolder.abandon`).
The local runner (``async-rl-train``) writes the configuration it trains with to
``<run>/config.yaml`` (a ``ros__parameters`` file) at each start and resume, and a resume
reads it back, so continuing a run needs none of the settings it was started with. A ROS 2
learner takes its parameters from the launch, resumed or not, and records them at each start
and resume in ``<run>/learner_parameters.yaml`` (its node's parameters, a file that
``ros2 run ... --params-file`` takes).

A run holds an exclusive ``flock`` on ``<run>/.lock`` (and on an outside checkpoint folder)
for as long as its process lives, so a second process cannot write into it; the kernel drops
the lock when the process dies, however it dies, and child processes do not inherit it.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
from pathlib import Path
import time
from typing import Any, Callable, Mapping

from async_rl_ros.core.learning.checkpoint import RUN_SUBDIR as CHECKPOINTS
from async_rl_ros.core.options import Section
from async_rl_ros.core.param_file import dump_node_parameters, dump_yaml_parameters
from async_rl_ros.core.sections.learning import LearnerConfig

__all__ = ['RunFolder', 'RunFolderError', 'open_run', 'find_run', 'write_whole', 'LATEST',
           'CHECKPOINTS', 'CONFIG', 'PARAMETERS']

LATEST = 'latest'  # the link to the newest run
CONFIG = 'config.yaml'  # the configuration a run trains with, in its folder
PARAMETERS = '{node}_parameters.yaml'  # a ROS 2 node's parameters, in its run's folder
_LOCK = '.lock'


class RunFolderError(ValueError):
    """A run folder cannot be used: none to resume, or another process holds it."""


def _lock(directory: Path) -> int:
    """Take the exclusive lock of ``directory``; return its file descriptor."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode('ascii', 'replace').strip() or '?'
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise RunFolderError(f'{directory} is in use by another training process (pid '
                             f'{holder}); wait for it to end, or start a new run') from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f'{os.getpid()}\n'.encode('ascii'), 0)
    return fd


@dataclasses.dataclass
class RunFolder:
    """
    One run's folder, locked by this process until :meth:`close`.

    :param path: the run's folder.
    :param resumed: whether the run continues an earlier one in this folder.
    """

    path: Path
    resumed: bool
    _fds: list[int] = dataclasses.field(default_factory=list, repr=False)
    _latest_before: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def start(cls, root: str | Path) -> 'RunFolder':
        """Make a new run folder named by the time under ``root`` and point ``latest`` at it."""
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime('%Y%m%d-%H%M%S')
        for n in range(1, 1000):
            path = root / (stamp if n == 1 else f'{stamp}-{n}')
            try:
                path.mkdir()  # atomic: two runs started together get two folders
                break
            except FileExistsError:
                continue
        else:
            raise RunFolderError(f'{root}: no free run folder name for {stamp}')
        latest = root / LATEST
        run = cls(path, resumed=False,
                  _latest_before=os.readlink(latest) if latest.is_symlink() else None)
        run._fds.append(_lock(path))
        link = root / f'.{LATEST}.{os.getpid()}'
        link.unlink(missing_ok=True)
        os.symlink(path.name, link)
        os.replace(link, root / LATEST)  # atomic: readers see the old or the new run
        return run

    @classmethod
    def resume(cls, root: str | Path, name: str = LATEST) -> 'RunFolder':
        """
        Open an earlier run to continue it: ``latest`` or one named by its folder.

        :param root: the root of the runs (``learner.log_dir``).
        :param name: ``latest``, a folder name under ``root``, or a path to a run folder.
        :raises RunFolderError: no such run, or another process holds it.
        """
        run = cls(find_run(root, name), resumed=True)
        run._fds.append(_lock(run.path))
        return run

    def save_config(self, sections: Mapping[str, Section]) -> Path:
        """
        Write the run's configuration to ``<run>/config.yaml``, whole or not at all.

        :param sections: node name -> the section the run trains with.
        """
        text = dump_yaml_parameters(sections)
        return write_whole(self.path / CONFIG,
                           lambda tmp: tmp.write_text(text, encoding='utf-8'))

    def save_parameters(self, node: str, params: Mapping[str, Any]) -> Path:
        """
        Write one ROS 2 node's parameters to ``<run>/<node>_parameters.yaml``, whole or not.

        :param node: the node's name, the file's only section.
        :param params: its parameters by dotted name (``sac.gamma``).
        """
        text = dump_node_parameters({node: params})
        return write_whole(self.path / PARAMETERS.format(node=node),
                           lambda tmp: tmp.write_text(text, encoding='utf-8'))

    def lock(self, directory: str | Path) -> None:
        """Also hold ``directory`` (an outside checkpoint folder) until :meth:`close`."""
        directory = Path(directory).resolve()
        if directory != self.path and self.path not in directory.parents:
            self._fds.append(_lock(directory))

    def abandon(self) -> bool:
        """
        Undo a new run that was refused before it wrote anything: no empty folder stays behind.

        The folder goes if it holds nothing but its locks, and ``latest`` points back at the
        run it named before (unless another run has been started since). A resumed run, or
        one that wrote a file (a log, a checkpoint, its configuration), is kept. Releases
        the locks.

        :returns: whether the folder was removed.
        """
        self.close()
        if self.resumed or not self.path.is_dir() or any(
                p.is_file() and p.name != _LOCK for p in self.path.rglob('*')):
            return False
        latest = self.path.parent / LATEST
        if latest.is_symlink() and os.readlink(latest) == self.path.name:
            if self._latest_before is None:
                latest.unlink()
            else:
                link = self.path.parent / f'.{LATEST}.{os.getpid()}'
                link.unlink(missing_ok=True)
                os.symlink(self._latest_before, link)
                os.replace(link, latest)
        for directory in sorted(self.path.rglob('*'), reverse=True) + [self.path]:
            (directory.rmdir if directory.is_dir() else directory.unlink)()
        return True

    def close(self) -> None:
        """Release the locks (the kernel does it too when the process ends)."""
        while self._fds:
            os.close(self._fds.pop())

    def __enter__(self) -> 'RunFolder':
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_whole(path: Path, write: Callable[[Path], Any]) -> Path:
    """
    Write a file of a run whole or not at all: ``write`` fills a temporary file beside it.

    :param path: the file (its folder is made if missing).
    :param write: called with the temporary file's path.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp')
    write(tmp)
    os.replace(tmp, path)  # atomic on POSIX within one file system
    return path


def find_run(root: str | Path, name: str = LATEST) -> Path:
    """
    Return the folder of an earlier run: ``latest`` or one named by its folder.

    :param root: the root of the runs (``learner.log_dir``).
    :param name: ``latest``, a folder name under ``root``, or a path to a run folder.
    :raises RunFolderError: no such run.
    """
    root = Path(root)
    path = root / name
    if not path.is_dir() and name != LATEST and Path(name).is_dir():
        path = Path(name)
    if not path.is_dir():
        runs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink()
                      and not p.name.startswith('.')) if root.is_dir() else []
        listed = f'runs there: {", ".join(runs[-5:])}' if runs else 'it holds no run'
        raise RunFolderError(f'no run {name!r} to resume in {root} ({listed})')
    return path.resolve()


def open_run(cfg: LearnerConfig, resume: str | None = None
             ) -> tuple[RunFolder, LearnerConfig]:
    """
    Start or resume a run under ``cfg.log_dir``; return it and the configuration it uses.

    The returned configuration's ``log_dir`` is the run's folder and its
    ``checkpoint.directory`` the run's ``checkpoints`` folder, unless one was configured
    (that folder is locked too). A configured folder that already holds checkpoints is only
    ever resumed from: a new run there would prune the earlier run's checkpoints. Resuming
    ``latest`` where no run folder exists yet but the configured folder holds checkpoints
    starts a new run folder from them.

    :param cfg: the ``learner`` section.
    :param resume: ``None`` starts a new run; ``latest`` or a run's name continues it.
    :raises RunFolderError: nothing to resume, a folder in use, or checkpoints in the way.
    """
    configured = cfg.checkpoint.directory
    held = bool(configured) and any(Path(configured).glob('ckpt_*.pt'))
    if resume is None and held:
        raise RunFolderError(f'{configured} holds the checkpoints of an earlier run: continue '
                             'it with --resume, or name another learner.checkpoint.directory')
    fresh = resume is None or (resume == LATEST and held
                               and not (Path(cfg.log_dir) / LATEST).exists())
    try:
        run = RunFolder.start(cfg.log_dir) if fresh else RunFolder.resume(cfg.log_dir, resume)
    except OSError as exc:
        raise _unusable('learner.log_dir', cfg.log_dir, exc) from None
    checkpoints = configured or str(run.path / CHECKPOINTS)
    try:
        run.lock(checkpoints)
    except OSError as exc:
        run.abandon()
        raise _unusable('learner.checkpoint.directory' if configured else 'learner.log_dir',
                        checkpoints, exc) from None
    except BaseException:
        run.abandon()
        raise
    return run, cfg.replace(**{'log_dir': str(run.path), 'checkpoint.directory': checkpoints})


def _unusable(key: str, path: str, exc: OSError) -> RunFolderError:
    """Say which option names a folder that cannot be made or written, and why."""
    why = 'a file is there' if Path(path).is_file() else (exc.strerror or str(exc))
    return RunFolderError(f'{key} = {path} is not a folder this user can create and write '
                          f'({why})')
