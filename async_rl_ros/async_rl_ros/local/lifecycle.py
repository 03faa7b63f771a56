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
How a training run starts, stops and ends: stop requests, exit codes, child watchdogs.

:class:`StopRequest` turns SIGINT and SIGTERM into a request every runner polls (``stop()``
is true once one arrived): the runner leaves its loop, the trainer writes the final
checkpoint and the artifacts, and the CLI exits with the code of :func:`StopRequest.exit_code`.
A second SIGINT aborts at once (``KeyboardInterrupt``; no final checkpoint); a second SIGTERM
is ignored, saving goes on (a service manager sends SIGKILL after its own grace period).

:meth:`StopRequest.contain` turns the expected failures of a run -- :class:`TrainingDiverged`
from the training doctor, :class:`NeedsPerson` from a real arm -- into a recorded outcome, so
the trainer still saves the last good state and the CLI reports one line instead of a
traceback.

Exit codes of ``async-rl-train`` (all but 1 come after the final checkpoint was written):

* 0 -- finished the budget;
* 1 -- an unexpected error (a bug: traceback);
* 2 -- bad input: configuration, command line, missing, corrupt or incompatible checkpoint;
* 3 -- the run stopped on an expected failure (training diverged, the robot needs a person);
* 130 -- stopped by SIGINT (Ctrl-C), 128 + 2 as shells report it;
* 143 -- stopped by SIGTERM (``timeout``, ``docker stop``, systemd, batch schedulers).

:func:`init_child` is the first call of every child process the runner starts: the child
dies with its parent however the parent ends (SIGKILL included), through Linux's
``PR_SET_PDEATHSIG`` and a polling thread as fallback (other platforms; a parent that died
before the child got to run), and is otherwise stopped by its parent alone, a signal to the
whole process group included. Once the children are gone, multiprocessing's resource tracker
sees its pipe close and exits too.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator

from async_rl_ros.core.options import ConfigError
from async_rl_ros.local.output import guard_output, say

__all__ = ['StopRequest', 'StopRun', 'WorkerFailed', 'stop_scope', 'restore_last_good',
           'die_with_parent', 'init_child', 'child_entry', 'check_child_exit',
           'describe_failure', 'EXIT_OK', 'EXIT_ERROR',
           'EXIT_BAD_INPUT', 'EXIT_FAILED', 'EXIT_SIGINT', 'EXIT_SIGTERM', 'expected_failures']

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_FAILED = 3
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM
PR_SET_PDEATHSIG = 1          # linux/prctl.h
WATCHDOG_POLL_S = 0.5         # s between two looks at the parent (fallback watchdog)
WATCHDOG_GRACE_S = 5.0        # s a child may spend on its SIGTERM handler before _exit
_SIGNAL_NAMES = {signal.SIGINT: 'SIGINT (Ctrl-C)', signal.SIGTERM: 'SIGTERM'}


class StopRun(Exception):
    """Raised by a step callback to leave a training loop that has no ``should_stop``."""


class WorkerFailed(RuntimeError):
    """A child process cannot run: it stopped on an expected failure, or cannot start."""


class StopRequest:
    """
    A stop request from SIGINT, SIGTERM or the program itself, and the outcome of the run.

    Use as ``with StopRequest() as stop:`` in the main thread (installs the handlers, restores
    the previous ones on exit) and pass ``stop`` -- a callable returning whether to stop --
    to the runners.

    :param notify: prints the one-line notice when a signal arrives (default: stderr).
    :param interrupt: also raise ``KeyboardInterrupt`` at the first signal, for code that
        has nothing to save and does not poll (a controller run); the outcome is recorded
        all the same.
    """

    signals = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, notify: Callable[[str], None] | None = None, interrupt: bool = False):
        self.interrupt = interrupt
        self.signum: int | None = None
        self.failure: BaseException | None = None
        self.reason: str | None = None
        self._notify = notify or say
        self._previous: dict[int, Any] = {}
        self._event = threading.Event()

    # ------------------------------------------------------------------ the request
    def __call__(self) -> bool:
        """Return whether the run should stop (usable as ``should_stop``)."""
        return self._event.is_set()

    @property
    def requested(self) -> bool:
        """Tell whether a stop was requested."""
        return self._event.is_set()

    @property
    def signal_name(self) -> str | None:
        """Return the name of the signal that asked the run to stop (``'SIGTERM'``), if one did."""
        return None if self.signum is None else signal.Signals(self.signum).name

    def request(self, reason: str) -> None:
        """Ask the run to stop (from any thread), e.g. on a fault the runner detected."""
        if self.reason is None:
            self.reason = reason
        self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop is requested or ``timeout`` passed; return whether it was."""
        return self._event.wait(timeout)

    # ------------------------------------------------------------------ signals
    def install(self) -> 'StopRequest':
        """Install the SIGINT and SIGTERM handlers (main thread only)."""
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self) -> None:
        """Restore the handlers that were there before :meth:`install`."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def __enter__(self) -> 'StopRequest':
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()

    def _handle(self, signum: int, frame: Any) -> None:
        name = _SIGNAL_NAMES.get(signum, f'signal {signum}')
        if self.signum is None:
            # The first signal, also after a failure that is already stopping the run: that
            # run still saves, and only a second Ctrl-C aborts it.
            self.signum = signum
            self.request(f'stopped by {name}')
            if self.interrupt:
                raise KeyboardInterrupt
            hint = ' (Ctrl-C again aborts without saving)' if signum == signal.SIGINT else ''
            doing = 'already stopping' if self.failure is not None else 'stopping'
            self._notify(f'\n{name}: {doing}; writing the final checkpoint and the '
                         f'artifacts ...{hint}')
            return
        if signum == signal.SIGINT:
            self._notify(f'{name} again: aborting without the final checkpoint')
            self.uninstall()
            raise KeyboardInterrupt
        self._notify(f'{name} again: already stopping, still saving')

    # ------------------------------------------------------------------ failures
    @contextlib.contextmanager
    def contain(self, on_failure: Callable[[BaseException], None] | None = None
                ) -> Iterator['StopRequest']:
        """
        Record an expected failure raised inside the block instead of letting it propagate.

        :param on_failure: called with the failure (e.g. restore the last good state).
        """
        try:
            yield self
        except expected_failures() as exc:
            self.failure = exc
            self.request(f'{describe_failure(exc)}: {exc}')
            if on_failure is not None:
                on_failure(exc)

    # ------------------------------------------------------------------ outcome
    @property
    def outcome(self) -> str:
        """Describe how the run ended, for the summary table."""
        return self.reason or 'finished'

    def exit_code(self) -> int:
        """Return the process exit status matching the outcome (see the module docstring)."""
        if self.failure is not None:
            return EXIT_FAILED
        if self.signum == signal.SIGINT:
            return EXIT_SIGINT
        if self.signum == signal.SIGTERM:
            return EXIT_SIGTERM
        return EXIT_OK


def expected_failures() -> tuple[type[BaseException], ...]:
    """Return the exception types a run reports instead of raising (imported on demand)."""
    from async_rl_ros.core.learning.doctor import TrainingDiverged
    from async_rl_ros.core.errors import NeedsPerson
    return TrainingDiverged, NeedsPerson, WorkerFailed


def describe_failure(exc: BaseException) -> str:
    """Name an expected failure in words (``training diverged`` ...)."""
    from async_rl_ros.core.learning.doctor import TrainingDiverged
    from async_rl_ros.core.errors import NeedsPerson
    if isinstance(exc, TrainingDiverged):
        return 'training diverged'
    if isinstance(exc, NeedsPerson):
        return 'the robot needs a person'
    if isinstance(exc, WorkerFailed):
        return 'a worker failed'
    if isinstance(exc, ConfigError):
        return 'configuration error'
    return type(exc).__name__


@contextlib.contextmanager
def stop_scope(stop: StopRequest | None = None) -> Iterator[StopRequest]:
    """
    Yield ``stop``, or a new :class:`StopRequest` handling the signals during the block.

    :param stop: a request installed by the caller (the CLI); ``None`` makes one here (its
        handlers are installed only in the main thread, where Python delivers signals).
    """
    if stop is not None:
        yield stop
        return
    own = StopRequest()
    if threading.current_thread() is threading.main_thread():
        own.install()
    try:
        yield own
    finally:
        own.uninstall()


def restore_last_good(learner: Any, stop: StopRequest) -> None:
    """
    After ``TrainingDiverged``, put the doctor's last good snapshot back into the learner.

    The final checkpoint then holds finite weights. Other failures leave the learner as it is.

    :param learner: has ``doctor.good_state`` (see :class:`~.doctor.GoodState`).
    :param stop: the request whose ``failure`` is checked and whose ``reason`` is completed.
    """
    from async_rl_ros.core.learning.doctor import TrainingDiverged
    if not isinstance(stop.failure, TrainingDiverged):
        return
    good = learner.doctor.good_state
    if good.has_snapshot:
        good.restore()
        stop.reason = f'{stop.reason}; the final checkpoint holds the last good state ' \
                      f'(snapshot of update {good.step})'
    else:
        stop.reason = f'{stop.reason}; no good state was kept: the final checkpoint holds ' \
                      'the state at the failure'


# ====================================================================== child processes
def _set_pdeathsig(signum: int) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent thread ends."""
    if not sys.platform.startswith('linux'):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _end_self(signum: int) -> None:
    """Send ``signum`` to this process; if it is still alive after the grace period, exit."""
    try:
        os.kill(os.getpid(), signum)
    except OSError:
        pass
    time.sleep(WATCHDOG_GRACE_S)
    os._exit(EXIT_ERROR)


def _watch_parent(parent_pid: int, signum: int, poll_s: float) -> None:
    while True:
        if os.getppid() != parent_pid:  # reparented: the parent is gone
            _end_self(signum)
            return
        time.sleep(poll_s)


def die_with_parent(parent_pid: int | None = None, signum: int = signal.SIGTERM,
                    poll_s: float = WATCHDOG_POLL_S) -> None:
    """
    Make this (child) process end when its parent ends, however the parent ends.

    Call it first thing in a child's entry point. Two mechanisms: ``prctl(PR_SET_PDEATHSIG)``
    on Linux (the kernel signals the child at once; note that it fires when the parent
    *thread* that started the child ends, so start children from a long-lived thread), and
    a daemon thread that polls ``os.getppid()`` every ``poll_s`` seconds and signals this
    process when it no longer is ``parent_pid``.

    :param parent_pid: the parent to watch (default: multiprocessing's parent, else getppid).
    :param signum: the signal the child gets (SIGTERM lets it run its handler).
    :param poll_s: seconds between two looks of the fallback watchdog.
    """
    parent_pid = _parent_pid(parent_pid)
    _set_pdeathsig(signum)
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        _end_self(signum)
    threading.Thread(target=_watch_parent, args=(parent_pid, signum, poll_s),
                     name='parent-watchdog', daemon=True).start()


def _parent_pid(parent_pid: int | None) -> int:
    """Return ``parent_pid``, by default multiprocessing's parent, else ``getppid()``."""
    if parent_pid is None:
        parent = multiprocessing.parent_process()
        parent_pid = parent.pid if parent is not None and parent.pid else os.getppid()
    return int(parent_pid)


def _sigterm_in_child(parent_pid: int, signum: int, frame: Any) -> None:
    if os.getppid() != parent_pid:  # the parent is gone: its death signal, or the watchdog's
        raise SystemExit(128 + signum)
    # The parent lives: it got the signal too and stops this child through its channel.


def init_child(parent_pid: int | None = None) -> None:
    """
    Set up a runner's child process: die with the parent, pipe-safe output, stop by the parent.

    The parent stops its children through its own channel (a stop event) after a Ctrl-C or a
    SIGTERM, and keeps what they send until then. So the terminal's SIGINT, which reaches the
    whole process group, is ignored here, and so is a SIGTERM while the parent lives
    (``timeout``, systemd's default ``KillMode=control-group`` and batch schedulers signal
    every process of a job). A SIGTERM once the parent is gone (the death signal, or the
    watchdog's) ends the child at once by ``SystemExit``: its ``finally`` blocks and exit
    handlers run (an env closed, a driven arm stopped, no semaphore left behind for
    multiprocessing's resource tracker to report).

    :param parent_pid: see :func:`die_with_parent`.
    """
    parent_pid = _parent_pid(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, functools.partial(_sigterm_in_child, parent_pid))
    guard_output()
    die_with_parent(parent_pid)


def child_entry(label: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """
    Decorate the entry point of a runner's child process, e.g. ``worker_main``.

    The child first calls :func:`init_child` (dies with its parent, pipe-safe output, stopped
    by its parent, not by a SIGINT or SIGTERM to the process group). An expected failure
    (:class:`NeedsPerson` ...), or a configuration it cannot run (``ConfigError``: a new process
    would fail alike), ends it with one line on stderr and exit status ``EXIT_FAILED`` instead
    of a traceback; the parent turns that status into :class:`WorkerFailed` with
    :func:`check_child_exit` rather than respawning the child.

    :param label: names the child in the line (its first argument, the id, is appended).
    """
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def entry(*args: Any, **kwargs: Any) -> Any:
            init_child()
            try:
                return fn(*args, **kwargs)
            except (*expected_failures(), ConfigError) as exc:
                who = f'{label} {args[0]}' if args else label
                say(f'{who}: {describe_failure(exc)}: {exc}')
                sys.exit(EXIT_FAILED)
        return entry
    return wrap


def check_child_exit(name: str, exitcode: int | None) -> None:
    """
    Raise :class:`WorkerFailed` if a child ended on an expected failure (do not respawn it).

    :param name: the child, for the message.
    :param exitcode: its ``multiprocessing.Process.exitcode``.
    """
    if exitcode == EXIT_FAILED:
        raise WorkerFailed(f'{name} stopped on a failure it cannot recover from (its reason '
                           'is the line above)')
