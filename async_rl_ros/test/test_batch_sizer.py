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

"""Tests of the dynamic batch sizer, driven by a fake memory probe and a fake clock."""

from __future__ import annotations

import logging

from async_rl_ros.core.config import ConfigError
from async_rl_ros.core.learning.batch_sizer import (BatchSizer, BatchSizerConfig, CudaMemoryProbe,
                                                    is_oom_error, MemoryReading, probe_for,
                                                    ProcessMemoryProbe)
import pytest
import torch

torch.set_num_threads(1)

CAPACITY = 80 * 2**30
LOGGER = 'async_rl_ros.core.learning.batch_sizer'


class FakeProbe:
    """Report a settable used fraction of an 80 GiB device."""

    def __init__(self, fraction=0.5):
        self.fraction = fraction
        self.reads = 0

    def read(self):
        """Return the current fake reading."""
        self.reads += 1
        if self.fraction is None:
            raise OSError('probe broken')
        return MemoryReading(int(self.fraction * CAPACITY), CAPACITY, 'fake')


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        """Return the current fake time."""
        return self.t


def make(fraction=0.5, **overrides):
    values = {'adjust_interval_s': 10.0, 'grow_on_cpu': True, 'initial_batch': 512}
    values.update(overrides)
    cfg = BatchSizerConfig().replace(**values)
    probe, clock = FakeProbe(fraction), FakeClock()
    return BatchSizer(cfg, probe=probe, time_fn=clock), probe, clock


def tick(sizer, clock, seconds=10.0):
    clock.t += seconds
    return sizer.maybe_adjust()


def test_defaults():
    sizer = BatchSizer(probe=FakeProbe())
    assert sizer.batch_size == 256
    assert sizer.cfg.adjust_interval_s == 300.0 and sizer.cfg.memory_fraction == 0.85


def test_config_checks():
    with pytest.raises(ConfigError, match='min_batch'):
        BatchSizerConfig(min_batch=64, max_batch=32, initial_batch=48).validate()
    with pytest.raises(ConfigError, match='initial_batch'):
        BatchSizerConfig(initial_batch=16).validate()
    with pytest.raises(ConfigError, match='grow_below'):
        BatchSizerConfig(grow_below=0.9).validate()


def test_grows_when_memory_is_plentiful_and_logs_the_reading(caplog):
    sizer, probe, clock = make(fraction=0.3)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert tick(sizer, clock) == 640
    change = sizer.history[-1]
    assert (change.old_size, change.new_size, change.reason) == (512, 640, 'grow')
    assert change.reading.fraction == pytest.approx(0.3)
    assert change.time == clock.t
    message = caplog.records[-1].getMessage()
    assert '512 -> 640' in message and '30.0 %' in message and 'fake' in message
    assert tick(sizer, clock) == 800
    assert sizer.metrics()['batch/size'] == 800.0
    assert sizer.metrics()['batch/memory_fraction'] == pytest.approx(0.3)


def test_growth_never_jumps_over_the_proportional_bound():
    sizer, probe, clock = make(fraction=0.69)
    # x1.25 would give 640; 512 * 0.85 / 0.69 = 630.7 -> 630 -> multiple of 8: 624.
    assert tick(sizer, clock) == 624


def test_shrinks_proportionally_above_the_cap(caplog):
    sizer, probe, clock = make(fraction=0.95)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert tick(sizer, clock) == 456  # floor(512 * 0.85 / 0.95) = 458 -> 456
    assert sizer.history[-1].reason == 'shrink'
    assert '95.0 %' in caplog.records[-1].getMessage()


def test_holds_inside_the_hysteresis_band():
    sizer, probe, clock = make(fraction=0.8)
    for _ in range(5):
        assert tick(sizer, clock) == 512
    assert sizer.history == [] and probe.reads == 5


def test_never_leaves_the_bounds():
    sizer, probe, clock = make(fraction=0.01, max_batch=3000, min_batch=40)
    sizes = [tick(sizer, clock) for _ in range(30)]
    assert max(sizes) == 3000 and all(40 <= s <= 3000 for s in sizes)
    probe.fraction = 0.999
    sizes = [tick(sizer, clock) for _ in range(60)]
    assert min(sizes) == 40 and all(40 <= s <= 3000 for s in sizes)
    assert all(40 <= c.new_size <= 3000 for c in sizer.history)


def test_respects_the_interval():
    sizer, probe, clock = make(fraction=0.1)
    assert tick(sizer, clock, 9.99) == 512
    assert probe.reads == 0 and sizer.history == []
    assert tick(sizer, clock, 0.01) == 640
    assert tick(sizer, clock, 5.0) == 640
    assert probe.reads == 1
    assert tick(sizer, clock, 5.0) == 800
    assert probe.reads == 2


def test_not_adaptive_keeps_the_size():
    sizer, probe, clock = make(fraction=0.1, adaptive=False)
    assert tick(sizer, clock, 100.0) == 512 and probe.reads == 0


def test_broken_probe_changes_nothing(caplog):
    sizer, probe, clock = make(fraction=None)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert tick(sizer, clock) == 512
    assert 'probe failed' in caplog.records[-1].getMessage()


def test_oom_halves_and_the_step_is_retried_with_the_smaller_batch(caplog):
    sizer, probe, clock = make(fraction=0.5)
    calls = []

    def step(batch_size):
        calls.append(batch_size)
        if batch_size > 256:
            raise torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2 GiB')
        return {'loss': 1.0, 'batch_size': batch_size}

    with caplog.at_level(logging.INFO, logger=LOGGER):
        result = sizer.run_with_oom_retry(step)
    assert calls == [512, 256]
    assert result == {'loss': 1.0, 'batch_size': 256}
    assert sizer.batch_size == 256 and sizer.ooms == 1
    change = sizer.history[-1]
    assert (change.old_size, change.new_size, change.reason) == (512, 256, 'oom')
    assert change.reading is not None and change.reading.fraction == pytest.approx(0.5)
    assert any('512 -> 256' in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)
    assert sizer.metrics()['batch/ooms'] == 1.0


def test_oom_as_runtime_error_and_other_errors():
    sizer, probe, clock = make()
    attempts = []

    def step(batch_size):
        attempts.append(batch_size)
        if len(attempts) < 3:
            raise RuntimeError('CUDA error: out of memory')
        return batch_size

    assert sizer.run_with_oom_retry(step) == 128
    assert [c.new_size for c in sizer.history] == [256, 128]

    def broken(batch_size):
        raise RuntimeError('shape mismatch')

    with pytest.raises(RuntimeError, match='shape mismatch'):
        sizer.run_with_oom_retry(broken)
    assert sizer.batch_size == 128


def test_oom_at_min_batch_raises():
    sizer, probe, clock = make(min_batch=256)

    def step(batch_size):
        raise torch.cuda.OutOfMemoryError('out of memory')

    with pytest.raises(torch.cuda.OutOfMemoryError):
        sizer.run_with_oom_retry(step)
    assert sizer.batch_size == 256
    assert sizer.on_oom() == 256


def test_no_growth_for_a_while_after_an_oom():
    sizer, probe, clock = make(fraction=0.1, oom_hold_s=100.0)
    assert sizer.on_oom() == 256
    for _ in range(9):
        assert tick(sizer, clock) == 256
    assert tick(sizer, clock) == 320
    probe.fraction = 0.9
    sizer.on_oom()
    assert tick(sizer, clock) < 160  # shrinking is never held


def test_is_oom_error():
    assert is_oom_error(torch.cuda.OutOfMemoryError('x'))
    assert is_oom_error(RuntimeError('CUDA out of memory. Tried to allocate 20.00 MiB'))
    assert is_oom_error(RuntimeError("DefaultCPUAllocator: can't allocate memory"))
    assert is_oom_error(MemoryError())
    assert not is_oom_error(RuntimeError('expected scalar type Float'))
    assert not is_oom_error(ValueError('out of memory'))


def test_real_probes():
    reading = probe_for('cpu').read()
    assert isinstance(probe_for('cpu'), ProcessMemoryProbe)
    assert 0 < reading.used_bytes < reading.capacity_bytes
    assert 0.0 < reading.fraction < 1.0
    assert 'GiB' in str(reading)
    assert isinstance(probe_for('cuda:0'), CudaMemoryProbe)
    if torch.cuda.is_available():
        cuda = CudaMemoryProbe('cuda').read()
        assert 0 < cuda.used_bytes <= cuda.capacity_bytes


@pytest.mark.parametrize('v2', [True, False])
def test_cgroup_limit_is_the_capacity(tmp_path, v2):
    if v2:
        (tmp_path / 'memory.max').write_text('1073741824\n')
        (tmp_path / 'memory.current').write_text('536870912\n')
        (tmp_path / 'memory.stat').write_text('anon 1\ninactive_file 134217728\n')
    else:
        (tmp_path / 'memory').mkdir()
        (tmp_path / 'memory/memory.limit_in_bytes').write_text('1073741824\n')
        (tmp_path / 'memory/memory.usage_in_bytes').write_text('536870912\n')
        (tmp_path / 'memory/memory.stat').write_text('total_inactive_file 134217728\n')
    reading = ProcessMemoryProbe(tmp_path).read()
    assert reading.source == 'cgroup'
    assert reading.capacity_bytes == 2**30
    assert reading.used_bytes == 2**29 - 2**27
    (tmp_path / ('memory.max' if v2 else 'memory/memory.limit_in_bytes')).write_text('max\n')
    assert ProcessMemoryProbe(tmp_path).read().source == 'host'


def test_cpu_learner_does_not_grow_unless_asked():
    cfg = BatchSizerConfig().replace(adjust_interval_s=10.0, initial_batch=512)
    probe, clock = FakeProbe(0.1), FakeClock()
    sizer = BatchSizer(cfg, probe=probe, time_fn=clock)
    clock.t += 11.0
    assert sizer.maybe_adjust() == 512  # plenty of memory, but a CPU update is compute-bound
    probe.fraction = 0.95
    clock.t += 11.0
    assert sizer.maybe_adjust() < 512  # shrinking still protects memory
