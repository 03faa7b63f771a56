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

"""The learner's worker table: batches, status reports and the fleet metrics drawn from them."""

import threading
import types

from async_rl_ros.core.transport.worker_table import WorkerTable
import pytest


def _status(source='sim', episodes=0, episodic_return=0.0, success_rate=0.0,
            weights_rejected=0):
    return types.SimpleNamespace(source=source, episodes=episodes,
                                 episodic_return=episodic_return, success_rate=success_rate,
                                 weights_rejected=weights_rejected)


def test_an_empty_table_reports_no_lag_and_no_workers():
    table = WorkerTable()
    assert len(table) == 0
    assert table.metrics(5) == {'charts/policy_lag_mean': 0.0, 'charts/policy_lag_max': 0.0,
                                'transport/rejected_weights': 0.0, 'transport/workers': 0.0}


def test_batches_count_per_worker_and_the_lag_is_the_newest_batchs():
    table = WorkerTable()
    table.received(0, 32, 3, 'sim', now=1.0)
    table.received(0, 16, 7, 'sim', now=2.0)
    table.received(1, 8, 4, 'real', now=3.0)
    table.received(2, 8, -1, 'sim', now=4.0)  # acted before any policy arrived: no lag
    rows = table.snapshot()
    assert rows[0]['transitions'] == 48 and rows[0]['batches'] == 2
    assert rows[0]['policy_version'] == 7 and rows[0]['last_seen'] == 2.0
    assert rows[1]['source'] == 'real' and rows[1]['status'] is None
    assert sorted(table.lags(10)) == [3, 6]
    metrics = table.metrics(10)
    assert metrics['charts/policy_lag_mean'] == 4.5 and metrics['charts/policy_lag_max'] == 6
    assert metrics['transport/workers'] == 0.0  # no status report yet
    rows[0]['batches'] = 99
    assert table.snapshot()[0]['batches'] == 2  # a copy


def test_reports_weight_the_return_by_episodes_and_are_used_up_once():
    table = WorkerTable()
    table.reported(0, _status(episodes=1, episodic_return=-10.0, success_rate=0.5,
                              weights_rejected=2), now=1.0)
    table.reported(1, _status(episodes=3, episodic_return=-2.0, success_rate=1.0,
                              weights_rejected=1), now=1.5)
    table.reported(1, _status(episodes=0, success_rate=0.0, weights_rejected=3), now=2.0)
    metrics = table.metrics(0)
    assert metrics['charts/episodic_return'] == pytest.approx((-10.0 + 3 * -2.0) / 4)
    assert metrics['charts/success_rate'] == pytest.approx(0.25)  # newest report per worker
    assert metrics['transport/rejected_weights'] == 5.0
    assert metrics['transport/workers'] == 2.0
    assert 'charts/episodic_return' not in table.metrics(0)  # the returns were used up
    assert len(table) == 2 and table.snapshot()[1]['status_time'] == 2.0


def test_a_worker_known_by_its_report_keeps_its_counts_when_batches_come():
    table = WorkerTable()
    table.reported(4, _status(source='real'), now=1.0)
    table.received(4, 10, 2, 'real', now=2.0)
    row = table.snapshot()[4]
    assert row['transitions'] == 10 and row['status'] is not None
    assert table.statuses() == [row['status']]


def test_threads_lose_no_batch():
    table = WorkerTable()

    def feed(worker_id):
        for i in range(500):
            table.received(worker_id, 1, i, 'sim', now=float(i))

    threads = [threading.Thread(target=feed, args=(w % 2,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {k: v['transitions'] for k, v in table.snapshot().items()} == {0: 1000, 1: 1000}
