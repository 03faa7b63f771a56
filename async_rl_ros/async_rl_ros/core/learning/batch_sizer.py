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
Dynamic learner batch size: as large as memory allows, never an out-of-memory crash.

Every ``adjust_interval_s`` the :class:`BatchSizer` reads a :class:`MemoryProbe` and applies
this rule, with ``f = used / capacity``, the cap ``c = memory_fraction`` and the low-water mark
``g = grow_below``:

* ``f > c`` -- **shrink proportionally**: ``n <- floor(n * c / f)``. That is exactly enough if
  all used memory scaled with the batch size; when part of it is fixed (weights, the CUDA
  context, other processes) it shrinks too little and the next interval shrinks again.
* ``f < g`` -- **grow** by ``grow_factor`` (x1.25), but never beyond ``n * c / f``: the size
  at which memory would reach the cap if all of it scaled with the batch. Since part of it is
  fixed, that bound is conservative, so growth cannot jump over the cap in one go.
* ``g <= f <= c`` -- hold (the hysteresis band keeps the size from oscillating).

Sizes are rounded down to a multiple of ``size_multiple`` and clamped to
``[min_batch, max_batch]``. A CUDA out-of-memory error halves the size at once
(:meth:`BatchSizer.on_oom`), and no growth happens for ``oom_hold_s`` afterwards;
:meth:`BatchSizer.run_with_oom_retry` re-runs the step with the smaller size. Every change is
logged with the reading behind it and appended to :attr:`BatchSizer.history`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
import time
from typing import Callable, Protocol, TypeVar

from async_rl_ros.core.config import BatchSizerConfig
import psutil
import torch

__all__ = [
    'BatchSizerConfig',
    'MemoryReading',
    'MemoryProbe',
    'CudaMemoryProbe',
    'ProcessMemoryProbe',
    'probe_for',
    'BatchSizeChange',
    'BatchSizer',
    'is_oom_error',
]

_LOG = logging.getLogger(__name__)
_GIB = float(1 << 30)
T = TypeVar('T')


# ====================================================================== memory probes
@dataclasses.dataclass(frozen=True)
class MemoryReading:
    """
    One memory measurement.

    :param used_bytes: memory in use.
    :param capacity_bytes: memory available in total.
    :param source: what was measured, for the log.
    """

    used_bytes: int
    capacity_bytes: int
    source: str = ''

    @property
    def fraction(self) -> float:
        """Return the used fraction of the capacity."""
        return self.used_bytes / self.capacity_bytes if self.capacity_bytes > 0 else 1.0

    def __str__(self) -> str:
        """Describe the reading as ``'3.10/80.00 GiB (3.9 %) cuda:0'``."""
        text = (f'{self.used_bytes / _GIB:.2f}/{self.capacity_bytes / _GIB:.2f} GiB '
                f'({100.0 * self.fraction:.1f} %)')
        return f'{text} {self.source}' if self.source else text


class MemoryProbe(Protocol):
    """Anything that reads memory use."""

    def read(self) -> MemoryReading:
        """
        Measure memory now.

        :returns: the reading.
        """


class CudaMemoryProbe:
    """
    GPU memory: the peak this process allocated since the last reading plus what others hold.

    ``used = (total - free - reserved) + max_allocated``: device memory not held by this
    process's caching allocator (CUDA context, other processes), plus the peak of the tensors
    this process allocated since the previous reading (the peak statistics are reset on every
    read). The allocator's cached-but-free blocks are not counted, so a smaller batch shows as
    less memory even before the cache is emptied.

    :param device: the CUDA device.
    """

    def __init__(self, device: torch.device | str | int = 'cuda'):
        self.device = torch.device(device)

    def read(self) -> MemoryReading:
        """
        Read the device's memory and reset the peak statistics.

        :returns: the reading.
        """
        free, total = torch.cuda.mem_get_info(self.device)
        reserved = torch.cuda.memory_reserved(self.device)
        peak = torch.cuda.max_memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        others = max(0, total - free - reserved)
        return MemoryReading(int(others + peak), int(total), str(self.device))


class ProcessMemoryProbe:
    """
    Host memory as seen by this process: the system's, or its cgroup's if that is smaller.

    ``used = total - available`` from psutil; inside a container with a memory limit, the
    cgroup's usage (less its inactive file cache, as ``docker stats`` does) against its limit.

    :param cgroup_root: where the cgroup (v2 or v1) files are mounted.
    """

    def __init__(self, cgroup_root: str | Path = '/sys/fs/cgroup'):
        self.cgroup_root = Path(cgroup_root)

    def read(self) -> MemoryReading:
        """
        Read host memory.

        :returns: the reading.
        """
        vm = psutil.virtual_memory()
        reading = MemoryReading(int(vm.total - vm.available), int(vm.total), 'host')
        cgroup = self._cgroup()
        if cgroup is not None and cgroup.capacity_bytes < reading.capacity_bytes:
            return cgroup
        return reading

    def _cgroup(self) -> MemoryReading | None:
        for limit_name, usage_name, inactive_key in (
                ('memory.max', 'memory.current', 'inactive_file'),
                ('memory/memory.limit_in_bytes', 'memory/memory.usage_in_bytes',
                 'total_inactive_file')):
            try:
                limit_text = (self.cgroup_root / limit_name).read_text().strip()
                usage = int((self.cgroup_root / usage_name).read_text().strip())
            except (OSError, ValueError):
                continue
            if not limit_text.isdigit():
                return None  # 'max': no limit
            inactive = 0
            stat = self.cgroup_root / Path(usage_name).parent / 'memory.stat'
            try:
                for line in stat.read_text().splitlines():
                    key, _, value = line.partition(' ')
                    if key == inactive_key:
                        inactive = int(value)
            except (OSError, ValueError):
                pass
            return MemoryReading(max(0, usage - inactive), int(limit_text), 'cgroup')
        return None


def probe_for(device: torch.device | str) -> MemoryProbe:
    """
    Return the memory probe that matches the learner's device.

    :param device: ``'cuda'``, ``'cuda:1'``, ``'cpu'`` ...
    :returns: a :class:`CudaMemoryProbe` for CUDA devices, else a :class:`ProcessMemoryProbe`.
    """
    device = torch.device(device)
    if device.type == 'cuda':
        return CudaMemoryProbe(device)
    return ProcessMemoryProbe()


def is_oom_error(exc: BaseException) -> bool:
    """
    Tell whether an exception is an out-of-memory error.

    :param exc: the exception.
    :returns: ``True`` for ``torch.cuda.OutOfMemoryError``, ``MemoryError`` and runtime errors
        whose message says ``out of memory`` (CUDA) or ``can't allocate memory`` (CPU).
    """
    oom_type = getattr(torch.cuda, 'OutOfMemoryError', None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, RuntimeError):
        message = str(exc).lower()
        return 'out of memory' in message or "can't allocate memory" in message
    return False


# ====================================================================== the sizer
@dataclasses.dataclass(frozen=True)
class BatchSizeChange:
    """
    One change of the batch size.

    :param time: ``time_fn()`` when it happened.
    :param old_size: size before.
    :param new_size: size after.
    :param reason: ``'grow'``, ``'shrink'`` or ``'oom'``.
    :param reading: the memory reading behind it (``None`` if the probe failed).
    """

    time: float
    old_size: int
    new_size: int
    reason: str
    reading: MemoryReading | None


class BatchSizer:
    """
    Choose the learner batch size from memory readings; see the module docstring for the rule.

    Call :meth:`maybe_adjust` once per learner update (it only reads the clock until the
    interval has elapsed) and run the update through :meth:`run_with_oom_retry`.

    :param cfg: settings; validated here.
    :param probe: memory probe; :func:`probe_for` of ``device`` when omitted.
    :param device: the learner's device, used when ``probe`` is omitted.
    :param time_fn: monotonic clock in seconds (injectable for tests).
    """

    def __init__(self, cfg: BatchSizerConfig | None = None, probe: MemoryProbe | None = None,
                 device: torch.device | str = 'cpu',
                 time_fn: Callable[[], float] = time.monotonic):
        self.cfg = cfg if cfg is not None else BatchSizerConfig()
        self.cfg.validate()
        self.probe = probe if probe is not None else probe_for(device)
        self.may_grow = self.cfg.grow_on_cpu or torch.device(device).type != 'cpu'
        self.time_fn = time_fn
        self.batch_size = self._clamp(self._quantize(self.cfg.initial_batch))
        self.history: list[BatchSizeChange] = []
        self.last_reading: MemoryReading | None = None
        self.ooms = 0
        self._last_adjust = time_fn()
        self._last_oom: float | None = None

    # ------------------------------------------------------------------ helpers
    def _quantize(self, size: float) -> int:
        multiple = self.cfg.size_multiple
        return max(multiple, int(size) // multiple * multiple)

    def _clamp(self, size: int) -> int:
        return max(self.cfg.min_batch, min(self.cfg.max_batch, size))

    def _read(self) -> MemoryReading | None:
        try:
            reading = self.probe.read()
        except Exception as exc:  # a broken probe must not stop training
            _LOG.warning('batch sizer: memory probe failed: %s', exc)
            return None
        self.last_reading = reading
        return reading

    def _set(self, new_size: int, reason: str, reading: MemoryReading | None,
             why: str, now: float) -> int:
        old = self.batch_size
        if new_size == old:
            return old
        self.batch_size = new_size
        self.history.append(BatchSizeChange(now, old, new_size, reason, reading))
        level = logging.WARNING if reason == 'oom' else logging.INFO
        _LOG.log(level, 'batch size %d -> %d (%s): memory %s; %s', old, new_size, reason,
                 reading if reading is not None else 'unreadable', why)
        return new_size

    # ------------------------------------------------------------------ public API
    def maybe_adjust(self) -> int:
        """
        Adjust the size if ``adjust_interval_s`` has elapsed since the last adjustment.

        :returns: the batch size to use now.
        """
        if not self.cfg.adaptive:
            return self.batch_size
        now = self.time_fn()
        if now - self._last_adjust < self.cfg.adjust_interval_s:
            return self.batch_size
        return self.adjust(now=now)

    def adjust(self, reading: MemoryReading | None = None, now: float | None = None) -> int:
        """
        Apply the resize rule to a reading now, regardless of the interval.

        :param reading: a reading; the probe is read when omitted.
        :param now: the time; ``time_fn()`` when omitted.
        :returns: the new batch size.
        """
        now = self.time_fn() if now is None else now
        self._last_adjust = now
        if reading is None:
            reading = self._read()
        else:
            self.last_reading = reading
        if reading is None:
            return self.batch_size
        size = self.batch_size
        f = reading.fraction
        cap, low = self.cfg.memory_fraction, self.cfg.grow_below
        if f > cap:
            new = self._clamp(self._quantize(math.floor(size * cap / f)))
            return self._set(min(new, size), 'shrink', reading,
                             f'used fraction {f:.3f} above the cap {cap:g}', now)
        if f < low and self.may_grow:
            held = self._last_oom is not None and now - self._last_oom < self.cfg.oom_hold_s
            if held:
                _LOG.debug('batch sizer: growth held after an out-of-memory error')
                return size
            bound = size * cap / f if f > 0 else math.inf
            target = min(size * self.cfg.grow_factor, bound)
            new = self._quantize(target)
            if new <= size and size + self.cfg.size_multiple <= bound:
                new = size + self.cfg.size_multiple
            new = self._clamp(new)
            return self._set(max(new, size), 'grow', reading,
                             f'used fraction {f:.3f} below the low-water mark {low:g}', now)
        return size

    def on_oom(self) -> int:
        """
        Halve the batch size after an out-of-memory error (not below ``min_batch``).

        :returns: the new size (unchanged when already at ``min_batch``).
        """
        now = self.time_fn()
        self.ooms += 1
        self._last_oom = now
        self._last_adjust = now
        new = self._clamp(self._quantize(self.batch_size // 2))
        return self._set(min(new, self.batch_size), 'oom', self._read(),
                         f'out-of-memory error #{self.ooms}', now)

    def run_with_oom_retry(self, step_fn: Callable[[int], T]) -> T:
        """
        Run one learner step, halving the batch and retrying it after an out-of-memory error.

        ``step_fn(batch_size)`` must be restartable: sample the batch, zero the gradients,
        compute, step the optimizers. An OOM happens before the optimizer step in practice
        (forward/backward allocate, the step works in place), so a retry loses nothing.
        The exception and its frames are dropped and the CUDA cache is emptied before the
        retry, so the failed attempt's tensors are freed.

        :param step_fn: the step, called with the batch size to use.
        :returns: what ``step_fn`` returns.
        :raises Exception: the out-of-memory error when the size is already ``min_batch``, and
            any other error unchanged.
        """
        while True:
            size = self.batch_size
            try:
                return step_fn(size)
            except Exception as exc:  # filtered by is_oom_error below
                if not is_oom_error(exc) or size <= self.cfg.min_batch:
                    raise
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            # Outside the except block: the traceback (and the tensors it holds) is gone.
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            _LOG.warning('batch sizer: out of memory at batch size %d: %s', size, message)
            if self.on_oom() >= size:
                raise RuntimeError(f'out of memory at batch size {size} and the batch cannot '
                                   'shrink further')

    def metrics(self) -> dict[str, float]:
        """
        Return the sizer's state for logging.

        :returns: ``batch/size``, ``batch/ooms`` and, once read, ``batch/memory_fraction``.
        """
        out = {'batch/size': float(self.batch_size), 'batch/ooms': float(self.ooms)}
        if self.last_reading is not None:
            out['batch/memory_fraction'] = self.last_reading.fraction
        return out
