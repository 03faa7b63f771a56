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
Terminal output that can never end a run: pipe-safe streams and a progress reporter.

``async-rl-train ... 2>&1 | tee log`` and a Ctrl-C end ``tee`` as well; the next write of the
trainer to the pipe fails with ``EPIPE``. :func:`guard_output` makes such writes harmless:
``SIGPIPE`` is ignored (so a write fails instead of killing the process) and ``sys.stdout`` /
``sys.stderr`` are wrapped in :class:`PipeSafeStream`, which swallows the error and points
the file descriptor at ``/dev/null`` so that everything later (including the interpreter's
final flush and writes from C code) goes nowhere -- and the trainer goes on to save.

:class:`Progress` is a tqdm bar on a terminal and plain periodic lines otherwise (a log file
or a pipe gets readable progress, not carriage returns).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from typing import Any, TextIO

__all__ = ['PipeSafeStream', 'guard_output', 'Progress', 'say']

_GONE = (errno.EPIPE, errno.EINVAL, errno.EBADF)  # reader gone / stream closed under us


class PipeSafeStream:
    """
    A text stream proxy whose writes and flushes never raise because the reader went away.

    :param stream: the stream to wrap (``sys.stdout`` or ``sys.stderr``).
    """

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        """Write ``text``; after a broken pipe, drop it silently."""
        if not self.broken:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._handle(exc)
        return len(text)

    def flush(self) -> None:
        """Flush; after a broken pipe, do nothing."""
        if not self.broken:
            try:
                self._stream.flush()
            except OSError as exc:
                self._handle(exc)

    def isatty(self) -> bool:
        """Tell whether the wrapped stream is a terminal (``False`` once broken)."""
        try:
            return not self.broken and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def _handle(self, exc: OSError) -> None:
        if isinstance(exc, BrokenPipeError) or exc.errno in _GONE:
            self.broken = True
            self._silence()
            return
        raise exc

    def _silence(self) -> None:
        """Point the descriptor at /dev/null so buffered and later output cannot fail again."""
        try:
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
        except (OSError, ValueError, AttributeError):
            return
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_output() -> None:
    """Ignore SIGPIPE and wrap ``sys.stdout`` and ``sys.stderr``; calling it again is harmless."""
    if hasattr(signal, 'SIGPIPE'):
        try:
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        except ValueError:  # not the main thread: keep Python's default (already ignored)
            pass
    for name in ('stdout', 'stderr'):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, PipeSafeStream):
            setattr(sys, name, PipeSafeStream(stream))


def say(message: str) -> None:
    """Print one line to stderr, flushed; never raises because stderr is gone."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(message + '\n')
        stream.flush()
    except (OSError, ValueError):
        pass


class Progress:
    """
    Progress of a run: a tqdm bar on a terminal, a plain line every ``interval_s`` otherwise.

    The subset of tqdm's interface the trainers use: :attr:`n`, :meth:`update`,
    :meth:`set_postfix`, :meth:`close`. Plain lines look like
    ``async: 1200/5000 steps (24%), 310 steps/s, success=0.10 lag=2``; one is printed at the
    first update, then at most one per ``interval_s``, and a last one at :meth:`close`.

    :param total: the step count at which the run is complete.
    :param initial: steps already done (a resumed run).
    :param desc: label in front of each line.
    :param unit: what is counted.
    :param enabled: ``False`` prints nothing at all.
    :param interval_s: seconds between two plain lines.
    :param stream: where to write (default: ``sys.stderr`` at construction time).
    """

    def __init__(self, total: int, initial: int = 0, desc: str = 'training', unit: str = 'step',
                 enabled: bool = True, interval_s: float = 10.0, stream: TextIO | None = None):
        self.total, self.n, self.desc, self.unit = int(total), int(initial), desc, unit
        self.enabled, self.interval_s = enabled, float(interval_s)
        self.stream = stream if stream is not None else sys.stderr
        self._postfix: dict[str, Any] = {}
        self._bar = None
        self._last_time: float | None = None
        self._last_n = self.n
        self._closed = False
        if enabled and self.stream is not None and self.stream.isatty():
            from tqdm import tqdm
            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit,
                             file=self.stream, dynamic_ncols=True, smoothing=0.05)

    @property
    def plain(self) -> bool:
        """Tell whether plain lines (not a bar) are printed."""
        return self.enabled and self._bar is None

    def update(self, n: int = 1) -> None:
        """Count ``n`` more steps."""
        self.n += int(n)
        if self._bar is not None:
            self._bar.update(n)
        elif self.plain:
            now = time.monotonic()
            if self._last_time is None or now - self._last_time >= self.interval_s:
                self._line(now)

    def set_postfix(self, **fields: Any) -> None:
        """Set the ``key=value`` fields shown after the count."""
        self._postfix = dict(fields)
        if self._bar is not None:
            self._bar.set_postfix(**fields)

    def close(self) -> None:
        """End the bar, or print the last plain line."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.plain:
            self._line(time.monotonic())

    def _line(self, now: float) -> None:
        parts = [f'{self.desc}: {self.n}/{self.total} '
                 f'{self.unit}s ({100.0 * self.n / max(1, self.total):.0f}%)']
        if self._last_time is not None and now > self._last_time:
            parts.append(f'{(self.n - self._last_n) / (now - self._last_time):.0f} '
                         f'{self.unit}s/s')
        if self._postfix:
            parts.append(' '.join(f'{k}={v}' for k, v in self._postfix.items()))
        self._last_time, self._last_n = now, self.n
        try:
            self.stream.write(', '.join(parts) + '\n')
            self.stream.flush()
        except (OSError, ValueError):
            pass
