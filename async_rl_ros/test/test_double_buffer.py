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

"""The learner's ingest double buffer under concurrent producers."""

import threading
import time

from async_rl_ros.core.transport.double_buffer import DoubleBuffer


def test_concurrent_producers_lose_nothing_and_keep_per_producer_order():
    buf = DoubleBuffer(lambda raw: (raw[0], raw[1] * 10), max_raw=100_000)
    producers, per = 4, 2000

    def produce(pid):
        for k in range(per):
            buf.put((pid, k))

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for t in threads:
        t.start()
    got, deadline = [], time.monotonic() + 60.0
    while len(got) < producers * per:
        got.extend(buf.take())
        time.sleep(0.001)
        assert time.monotonic() < deadline, f'only {len(got)} batches arrived'
    for t in threads:
        t.join()
    assert len(got) == producers * per and buf.dropped == 0
    for pid in range(producers):
        assert [v for p, v in got if p == pid] == [10 * k for k in range(per)]
    assert buf.swaps >= 1
    buf.close()


def test_halves_alternate():
    buf = DoubleBuffer(lambda raw: raw)
    for k in range(3):
        buf.put(k)
        assert buf.drain()
        assert buf.take() == [k]
        assert buf.take() == []
    assert buf.swaps == 3
    buf.close()


def test_take_never_waits_for_preprocessing():
    release = threading.Event()

    def slow(raw):
        release.wait(5.0)
        return raw

    buf = DoubleBuffer(slow)
    buf.put(1)
    start = time.perf_counter()
    assert buf.take() == []  # the only batch is still being preprocessed
    assert time.perf_counter() - start < 0.05
    release.set()
    assert buf.drain()
    assert buf.take() == [1]
    buf.close()


def test_full_raw_queue_drops_oldest_and_bad_batches_are_rejected():
    gate = threading.Event()

    def check(raw):
        gate.wait(5.0)
        if raw < 0:
            raise ValueError('bad batch')
        return None if raw == 0 else raw

    buf = DoubleBuffer(check, max_raw=3)
    for v in (5, 6, 7, 8, 9):  # the thread may hold one; the queue keeps the newest three
        buf.put(v)
    buf.put(-1)
    buf.put(0)
    gate.set()
    assert buf.drain()
    ready = buf.take()
    assert buf.dropped >= 2 and buf.received == 7
    assert buf.rejected == 2  # the exception and the None
    assert ready == sorted(ready) and set(ready) <= {5, 6, 7, 8, 9}
    assert buf.depth() == {'raw': 0, 'ready': 0}
    buf.close()


def test_recent_keys_refuse_a_second_delivery_per_sender_within_the_window():
    from async_rl_ros.core.transport.duplicates import RecentKeys

    keys = RecentKeys(window=3)
    assert all(keys.fresh(0, k) for k in (10, 11, 12))
    assert keys.fresh(1, 10)                  # another worker's batch with the same stamp
    assert not keys.fresh(0, 11) and not keys.fresh(1, 10)
    assert keys.duplicates == 2
    assert keys.fresh(0, 13)                  # pushes 10 out of worker 0's window ...
    assert keys.fresh(0, 10)                  # ... so it is taken again
    assert not keys.fresh(0, 13) and keys.duplicates == 3


def test_wait_wakes_when_a_batch_is_ready_not_after_its_timeout():
    """An idle trainer waits on the preprocessing thread, not on a clock."""
    buf = DoubleBuffer(lambda raw: raw)
    assert buf.wait(0.0) is False  # nothing there: no wait at all
    woke = []
    # Far longer than pytest's own timeout: a wait that the batch did not end fails the test.
    waiter = threading.Thread(target=lambda: woke.append(buf.wait(3600.0)))
    waiter.start()
    buf.put(7)
    waiter.join()
    assert woke == [True] and buf.take() == [7]
    assert buf.wait(0.0) is False  # taken: nothing ready again


def test_close_ends_a_wait():
    buf = DoubleBuffer(lambda raw: raw)
    woke = []
    waiter = threading.Thread(target=lambda: woke.append(buf.wait(3600.0)))
    waiter.start()
    buf.close()
    waiter.join()
    assert woke == [False]
