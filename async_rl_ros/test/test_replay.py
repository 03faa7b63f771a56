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
Tests of the count-aware prioritized replay buffer.

The frequency tests use Pearson's chi-square statistic against a critical value from the
Wilson-Hilferty approximation (no scipy): if ``X ~ chi2(k)`` then ``(X / k) ** (1 / 3)`` is
close to normal with mean ``1 - 2 / (9k)`` and variance ``2 / (9k)``, so the ``1 - a`` quantile
is ``k * (1 - 2 / (9k) + z_{1-a} * sqrt(2 / (9k))) ** 3``; for ``k >= 30`` the error is well
below 1 %. The seeds are fixed, so the tests are deterministic; the level ``a = 1e-3`` keeps
them sound (a correct sampler would fail with probability 1e-3 for a random seed), and each
test also checks that the statistic rejects a plausible wrong distribution, so it has power.
"""

import math
from statistics import NormalDist
import sys
import threading
import time

from async_rl_ros.core.config import ConfigError
from async_rl_ros.core.learning.replay import (CountAwarePrioritizedSampler, MinTree, ReplayBuffer,
                                               ReplayConfig, ReplayStorage, SumTree)
from async_rl_ros.core.records import SOURCES, TRANSITION_FIELDS as FIELDS
from hypothesis import given, settings
from hypothesis import strategies as st
import numpy as np
import pytest

OBS_DIM = 3
ACT_DIM = 2
LEVEL = 1e-3


def chi2_critical(dof: int, level: float = LEVEL) -> float:
    """Return the ``1 - level`` quantile of chi2(dof) by the Wilson-Hilferty approximation."""
    z = NormalDist().inv_cdf(1.0 - level)
    h = 2.0 / (9.0 * dof)
    return dof * (1.0 - h + z * math.sqrt(h)) ** 3


def chi2_statistic(observed: np.ndarray, expected: np.ndarray) -> float:
    """Return Pearson's statistic ``sum (O - E)^2 / E``."""
    observed = np.asarray(observed, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert expected.min() >= 5.0, 'chi-square needs at least 5 expected draws per cell'
    assert math.isclose(observed.sum(), expected.sum(), rel_tol=1e-9)
    return float(((observed - expected) ** 2 / expected).sum())


def make_batch(n: int, version: int | np.ndarray = 0, worker: int = 0, start: float = 0.0
               ) -> dict[str, np.ndarray]:
    """Build ``n`` transitions whose reward is ``start, start + 1, ...`` (to identify them)."""
    reward = start + np.arange(n, dtype=np.float32)
    return {
        'obs': np.repeat(reward[:, None], OBS_DIM, axis=1),
        'action': np.zeros((n, ACT_DIM), dtype=np.float32),
        'reward': reward,
        'next_obs': np.repeat(reward[:, None] + 0.5, OBS_DIM, axis=1),
        'terminated': np.arange(n) % 2 == 0,
        'truncated': np.zeros(n, dtype=bool),
        'policy_version': np.broadcast_to(np.asarray(version, dtype=np.int64), (n,)).copy(),
        'worker_id': np.full(n, worker, dtype=np.int32),
    }


def make_buffer(capacity: int = 64, seed: int = 0, **options) -> ReplayBuffer:
    cfg = ReplayConfig(capacity=capacity, seed=seed, **options)
    cfg.validate()
    return ReplayBuffer(cfg, OBS_DIM, ACT_DIM)


def assert_tree_invariants(sampler: CountAwarePrioritizedSampler) -> None:
    """Check every internal node and the leaves against an independent recomputation."""
    for tree, combine in ((sampler.sum_tree, np.add), (sampler.min_tree, np.minimum)):
        nodes = tree.state_dict()['tree']
        size = len(nodes) // 2
        internal = np.arange(1, size)
        np.testing.assert_array_equal(nodes[internal],
                                      combine(nodes[2 * internal], nodes[2 * internal + 1]))
    filled = np.flatnonzero(sampler.sum_tree.leaves() > 0)
    q = sampler.priority(filled) ** sampler.cfg.priority_exponent
    np.testing.assert_allclose(sampler.sum_tree.get(filled), q, rtol=1e-12)
    np.testing.assert_allclose(sampler.sum_tree.total(), q.sum(), rtol=1e-9)
    if filled.size:
        assert sampler.min_tree.minimum() == pytest.approx(q.min(), rel=1e-12)


# ====================================================================== configuration
def test_config_defaults_and_ranges():
    cfg = ReplayConfig()
    cfg.validate()
    assert (cfg.capacity, cfg.alpha, cfg.priority_exponent, cfg.staleness) == \
        (1_000_000, 0.6, 1.0, 'off')
    for key, value in (('alpha', 1.5), ('eps', 0.0), ('staleness', 'drop'),
                       ('stale_weight', -0.1), ('capacity', 0), ('beta_start', 2.0)):
        with pytest.raises(ConfigError) as err:
            ReplayConfig.from_flat({key: value})
        assert err.value.key == key
    assert ReplayConfig.from_flat({'staleness': 'skip'}).staleness == 'skip'
    with pytest.raises(ConfigError):
        ReplayBuffer({'capacity': 8}, OBS_DIM, ACT_DIM)


# ====================================================================== trees
@settings(max_examples=40, deadline=None)
@given(capacity=st.integers(1, 300), seed=st.integers(0, 2**31 - 1),
       rounds=st.integers(1, 12))
def test_tree_invariants_under_random_updates(capacity, seed, rounds):
    rng = np.random.default_rng(seed)
    sums, mins = SumTree(capacity), MinTree(capacity)
    leaves = np.zeros(capacity)
    for _ in range(rounds):
        idx = np.unique(rng.integers(0, capacity, rng.integers(1, capacity + 1)))
        values = rng.exponential(size=idx.size) * (rng.random(idx.size) > 0.2)
        sums.update(idx, values)
        mins.update(idx, np.where(values > 0, values, np.inf))
        leaves[idx] = values
        for tree, combine in ((sums, np.add), (mins, np.minimum)):
            nodes = tree.state_dict()['tree']
            internal = np.arange(1, len(nodes) // 2)
            np.testing.assert_array_equal(nodes[internal],
                                          combine(nodes[2 * internal], nodes[2 * internal + 1]))
        assert sums.total() == pytest.approx(leaves.sum(), rel=1e-12, abs=1e-12)
        positive = leaves[leaves > 0]
        assert mins.minimum() == (positive.min() if positive.size else np.inf)
        np.testing.assert_array_equal(sums.leaves(), leaves)


def test_prefix_search_matches_cumsum_and_skips_empty_leaves():
    rng = np.random.default_rng(1)
    capacity = 1000
    tree = SumTree(capacity)
    leaves = rng.random(capacity) * (rng.random(capacity) > 0.3)
    # Incremental updates (batches far below capacity / 4) and the bulk path must agree.
    for chunk in np.array_split(np.arange(capacity), 50):
        tree.update(chunk, leaves[chunk])
    bulk = SumTree(capacity)
    bulk.set_leaves(leaves)
    np.testing.assert_array_equal(tree.state_dict()['tree'], bulk.state_dict()['tree'])
    targets = rng.random(20000) * tree.total()
    found = tree.find_prefix(targets)
    expected = np.searchsorted(np.cumsum(leaves), targets, side='right')
    # cumsum and the tree add in different orders: allow a neighbour at exact boundaries.
    mismatch = found != expected
    assert mismatch.mean() < 1e-3
    assert (leaves[found] > 0).all()
    # Targets at and beyond the total (rounding overflow) still land on a non-empty leaf.
    edge = tree.find_prefix(np.array([tree.total(), np.nextafter(tree.total(), 0.0), 0.0]))
    assert (leaves[edge] > 0).all()
    assert edge[0] == np.flatnonzero(leaves)[-1]


# ====================================================================== sampling law
def test_frequencies_match_priorities_chi_square():
    """With alpha = 1 the counts do not enter p_i, so every draw has P_i = q_i / sum(q)."""
    n_items, calls, batch = 50, 400, 256
    buf = make_buffer(capacity=n_items, seed=7, alpha=1.0, priority_exponent=0.7)
    idx = buf.extend(make_batch(n_items))
    td = np.random.default_rng(3).uniform(0.05, 2.0, n_items) * np.sign(np.arange(n_items) - 9.5)
    buf.update_priority(idx, td)
    q = (np.abs(td) + buf.cfg.eps) ** 0.7
    expected_p = q / q.sum()
    observed = np.zeros(n_items)
    for _ in range(calls):
        drawn, _, info = buf.sample(batch)
        np.testing.assert_allclose(info['probabilities'], expected_p[drawn], rtol=1e-9)
        observed += np.bincount(drawn, minlength=n_items)
    draws = calls * batch
    assert draws >= 10**5
    critical = chi2_critical(n_items - 1)
    assert chi2_statistic(observed, draws * expected_p) < critical
    # Power: the same data reject plain uniform sampling and the exponent-free law.
    assert chi2_statistic(observed, np.full(n_items, draws / n_items)) > critical
    p_raw = (np.abs(td) + buf.cfg.eps) / (np.abs(td) + buf.cfg.eps).sum()
    assert chi2_statistic(observed, draws * p_raw) > critical


def test_frequencies_follow_count_aware_priorities_chi_square():
    """
    With alpha < 1 every call changes p_i: compare with an independent model of the counts.

    The draws of call t are multinomial given the history, with probabilities P_t computed
    here from the counts this test tracks itself. Pearson's statistic with
    ``E_i = sum_t B * P_t(i)`` then has a covariance no larger (in the Loewner order) than a
    single multinomial's, so the chi2(k - 1) critical value is conservative, not optimistic.
    """
    n_items, calls, batch = 40, 400, 256
    alpha, eps = 0.6, 1e-6
    buf = make_buffer(capacity=n_items, seed=11, alpha=alpha, eps=eps)
    idx = buf.extend(make_batch(n_items))
    td = np.random.default_rng(5).uniform(0.0, 0.3, n_items)
    buf.update_priority(idx, td)
    counts = np.zeros(n_items)
    observed = np.zeros(n_items)
    expected = np.zeros(n_items)
    expected_static = np.zeros(n_items)
    for _ in range(calls):
        p = alpha * td + (1 - alpha) / np.sqrt(counts + 1) + eps
        p_static = alpha * td + (1 - alpha) + eps
        drawn, _, info = buf.sample(batch)
        np.testing.assert_allclose(info['priorities'], p[drawn], rtol=1e-12)
        hits = np.bincount(drawn, minlength=n_items)
        observed += hits
        counts += hits
        expected += batch * p / p.sum()
        expected_static += batch * p_static / p_static.sum()
    np.testing.assert_array_equal(buf.sampler.counts[:n_items], counts)
    critical = chi2_critical(n_items - 1)
    assert chi2_statistic(observed, expected) < critical
    # Power: a sampler that ignored the counts would be rejected.
    assert chi2_statistic(observed, expected_static) > critical


def test_uniform_when_alpha_zero_and_counts_equal():
    n_items, draws = 100, 200_000
    buf = make_buffer(capacity=n_items, seed=2, alpha=0.0)
    idx = buf.extend(make_batch(n_items))
    buf.update_priority(idx, np.random.default_rng(0).uniform(0, 5, n_items))  # ignored
    drawn, _, info = buf.sample(draws)   # one call: every count is 0 during the draw
    np.testing.assert_allclose(info['probabilities'], 1.0 / n_items, rtol=1e-12)
    np.testing.assert_allclose(info['weights'], 1.0, rtol=1e-6)
    observed = np.bincount(drawn, minlength=n_items)
    critical = chi2_critical(n_items - 1)
    assert chi2_statistic(observed, np.full(n_items, draws / n_items)) < critical
    # Power: tilting one cell by 3 % on this sample size is rejected.
    tilted = np.full(n_items, 1.0)
    tilted[: n_items // 2] = 1.03
    tilted *= draws / tilted.sum()
    assert chi2_statistic(observed, tilted) > critical


def test_count_term_decays_for_often_sampled_items():
    alpha, eps = 0.5, 1e-6
    buf = make_buffer(capacity=40, seed=3, alpha=alpha, eps=eps)
    old = buf.extend(make_batch(20))
    p0 = buf.sampler.priority(old)
    np.testing.assert_allclose(p0, alpha * 1.0 + (1 - alpha) + eps)   # max |TD| starts at 1
    hits = np.zeros(40)
    for _ in range(100):
        drawn, _, _ = buf.sample(64)
        hits += np.bincount(drawn, minlength=40)
    counts = buf.sampler.counts[old]
    np.testing.assert_array_equal(counts, hits[old])
    p1 = buf.sampler.priority(old)
    np.testing.assert_allclose(p1, alpha + (1 - alpha) / np.sqrt(counts + 1) + eps)
    assert (p1 < p0).all()
    # More draws, lower priority: the order of priorities reverses the order of counts.
    order = np.argsort(counts, kind='stable')
    assert (np.diff(p1[order]) <= 0).all()
    # Fresh items (count 0) now take far more than their 50 % head-count share.
    new = buf.extend(make_batch(20, start=100.0))
    share_before = buf.sampler.probabilities(old).sum()
    drawn, _, info = buf.sample(20_000)
    share_new = np.isin(drawn, new).mean()
    expected_new = 1.0 / (1.0 + (alpha + (1 - alpha) / np.sqrt(counts + 1) + eps).sum()
                          / (20 * (1.0 + eps)))
    assert share_new == pytest.approx(expected_new, abs=0.02)
    assert share_new > 0.6
    assert share_before < 0.4
    # Every TD term is equal (max |TD| = 1): the sampling share of a slot falls with its count.
    everything = np.arange(40)
    order = np.argsort(buf.sampler.counts[everything], kind='stable')
    assert (np.diff(buf.sampler.probabilities(everything)[order]) <= 0).all()
    assert np.ptp(buf.sampler.counts[everything]) > 0


def test_a_draw_and_its_td_errors_refresh_the_trees_once():
    """A sample's draw counts reach the trees with its TD errors: one refresh, not two."""
    buf = make_buffer(capacity=64)
    buf.extend(make_batch(32))
    sampler = buf.sampler
    refreshed = []
    for tree in (sampler.sum_tree, sampler.min_tree):
        def counted(idx, values, update=tree.update):
            refreshed.append(len(idx))
            update(idx, values)
        tree.update = counted
    for step in range(5):
        indices, _, info = buf.sample(16)
        buf.update_priority(indices, np.full(16, 0.5 + step), insert_ids=info['insert_ids'])
        assert len(refreshed) == 2, refreshed  # the sum tree and the min tree, once each
        refreshed.clear()
        assert_tree_invariants(sampler)
    # A reader between a draw and its TD errors sees the trees with the new counts.
    buf.sample(16)
    assert_tree_invariants(sampler)


def test_new_transitions_enter_with_max_priority():
    buf = make_buffer(capacity=32, seed=4, alpha=0.6)
    idx = buf.extend(make_batch(10))
    assert buf.sampler.max_td == 1.0
    buf.update_priority(idx, np.linspace(-3.0, 0.5, 10))  # sign is ignored
    assert buf.sampler.max_td == 3.0
    buf.update_priority(idx[:2], [0.1, 0.2])              # running max never decreases
    assert buf.sampler.max_td == 3.0
    buf.sample(16)
    new = buf.extend(make_batch(3, start=50.0))
    p_new = buf.sampler.priority(new)
    np.testing.assert_allclose(p_new, 0.6 * 3.0 + 0.4 + buf.cfg.eps)
    assert p_new.min() > buf.sampler.priority(idx).max()
    np.testing.assert_array_equal(buf.sampler.counts[new], 0)


def test_importance_weights_formula():
    beta_start = 0.4
    buf = make_buffer(capacity=16, seed=5, alpha=0.8, priority_exponent=1.5,
                      beta_start=beta_start, beta_steps=1000)
    idx = buf.extend(make_batch(16))
    td = np.linspace(0.01, 4.0, 16)
    buf.update_priority(idx, td)
    q_all = buf.sampler.priority(idx) ** 1.5
    drawn, _, info = buf.sample(4000)
    assert info['weights'].dtype == np.float32
    assert info['beta'] == beta_start
    expected = (q_all[drawn] / q_all.min()) ** -beta_start
    np.testing.assert_allclose(info['weights'], expected, rtol=1e-6)
    assert (info['weights'] > 0).all() and (info['weights'] <= 1).all()
    # The least likely slot (smallest TD, here slot 0) gets weight exactly 1.
    assert np.isin(0, drawn)
    assert info['weights'][drawn == 0].max() == 1.0
    assert info['weights'][drawn == 15].max() < info['weights'][drawn == 0].min()


def test_real_weight_tilts_draws_towards_real_data_chi_square():
    """Real transitions are drawn real_weight times as often; weights keep the preference."""
    n_sim, n_real, calls, batch = 30, 30, 200, 256
    buf = make_buffer(capacity=n_sim + n_real, seed=21, alpha=1.0, real_weight=3.0)
    buf.extend(make_batch(n_sim))                       # 'source' left out: simulated
    buf.extend(dict(make_batch(n_real, start=100.0), source=SOURCES.index('real')))
    assert list(buf.storage.source) == [0] * n_sim + [1] * n_real
    mass = np.r_[np.ones(n_sim), np.full(n_real, 3.0)]
    expected_p = mass / mass.sum()
    observed = np.zeros(n_sim + n_real)
    for _ in range(calls):
        drawn, got, info = buf.sample(batch)
        np.testing.assert_allclose(info['probabilities'], expected_p[drawn], rtol=1e-9)
        np.testing.assert_array_equal(got['source'], (drawn >= n_sim).astype(np.int8))
        # Equal priorities: importance weights ignore the source weight, all are 1.
        np.testing.assert_allclose(info['weights'], 1.0)
        observed += np.bincount(drawn, minlength=n_sim + n_real)
        buf.update_priority(drawn, np.ones(batch))      # keep alpha = 1 priorities equal
    draws = calls * batch
    critical = chi2_critical(n_sim + n_real - 1)
    assert chi2_statistic(observed, draws * expected_p) < critical
    assert chi2_statistic(observed, np.full(n_sim + n_real, draws / (n_sim + n_real))) > critical
    assert observed[n_sim:].sum() / draws == pytest.approx(0.75, abs=0.01)


def test_source_tags_survive_state_dict_and_old_states_load_as_sim():
    buf = make_buffer(capacity=8, seed=2, real_weight=4.0)
    buf.extend(dict(make_batch(4), source=np.array([0, 1, 1, 0], dtype=np.int8)))
    state = buf.state_dict()
    restored = make_buffer(capacity=8, seed=2, real_weight=4.0)
    restored.load_state_dict(state)
    np.testing.assert_array_equal(restored.storage.source[:4], [0, 1, 1, 0])
    np.testing.assert_allclose(restored.sampler.probabilities(np.arange(4)),
                               np.array([1, 4, 4, 1]) / 10.0)
    # A different real_weight is applied on load (the trees are rebuilt).
    reweighted = make_buffer(capacity=8, seed=2, real_weight=1.0)
    reweighted.load_state_dict(state)
    np.testing.assert_allclose(reweighted.sampler.probabilities(np.arange(4)), 0.25)
    # A checkpoint written before the source field existed loads as simulated data.
    for part in ('storage', 'sampler'):
        state[part].pop('source')
    state['sampler']['priority_key'].pop('real_weight')
    old = make_buffer(capacity=8, seed=2, real_weight=4.0)
    old.load_state_dict(state)
    np.testing.assert_array_equal(old.storage.source[:4], 0)
    np.testing.assert_allclose(old.sampler.probabilities(np.arange(4)), 0.25)
    with pytest.raises(ConfigError, match='real_weight'):
        make_buffer(real_weight=0.0)


def test_beta_anneals_linearly_to_one():
    buf = make_buffer(capacity=8, seed=6, beta_start=0.4, beta_steps=10)
    buf.extend(make_batch(8))
    betas = [buf.sample(4)[2]['beta'] for _ in range(15)]
    np.testing.assert_allclose(betas[:11], 0.4 + 0.06 * np.arange(11))
    assert betas[10:] == [1.0] * 5
    instant = make_buffer(capacity=8, beta_start=0.4, beta_steps=0)
    instant.extend(make_batch(8))
    assert instant.sample(4)[2]['beta'] == 1.0


# ====================================================================== staleness
def test_staleness_weight_multiplies_weights():
    versions = np.arange(20)  # slot i was collected by policy version i
    common = {'capacity': 20, 'seed': 8, 'max_policy_lag': 5, 'alpha': 0.6}
    off = make_buffer(**common)
    weighted = make_buffer(stale_weight=0.5, staleness='weight', **common)
    for buf in (off, weighted):
        buf.extend(make_batch(20, version=versions))
    learner = 19
    for _ in range(5):
        i_off, _, info_off = off.sample(256, learner_version=learner)
        i_w, batch, info_w = weighted.sample(256, learner_version=learner)
        np.testing.assert_array_equal(i_off, i_w)   # weighting does not change the draws
        lag = learner - versions[i_w]
        np.testing.assert_array_equal(info_w['policy_lag'], lag)
        np.testing.assert_array_equal(batch['policy_version'], versions[i_w])
        np.testing.assert_array_equal(info_w['stale'], lag > 5)
        factor = 0.5 ** np.maximum(lag - 5, 0)
        np.testing.assert_allclose(info_w['weights'], info_off['weights'] * factor, rtol=1e-6)
    # Without the learner's version nothing is judged.
    _, _, info = weighted.sample(64)
    assert not info['stale'].any() and not info['policy_lag'].any()


def test_staleness_skip_redraws_and_evicts():
    buf = make_buffer(capacity=100, seed=9, staleness='skip', max_policy_lag=2,
                      skip_redraws=4)
    versions = np.where(np.arange(100) < 80, 0, 10)   # 80 stale, 20 fresh at learner 10
    buf.extend(make_batch(100, version=versions))
    fresh = np.arange(80, 100)
    drawn, _, info = buf.sample(512, learner_version=10)
    assert len(drawn) == 512
    live = info['weights'] > 0
    # Everything returned with a positive weight is fresh ...
    assert (info['policy_lag'][live] <= 2).all()
    assert not info['stale'][live].any()
    np.testing.assert_array_equal(info['weights'][info['stale']], 0.0)
    # ... and the rounds of re-drawing left next to nothing stale.
    assert info['stale'].mean() < 0.02
    # Evicted slots are out of every later draw, even after a priority update.
    stale_seen = np.unique(drawn[info['stale'] | ~np.isin(drawn, fresh)])
    buf.update_priority(np.arange(100), np.full(100, 5.0))
    assert buf.stats()['evicted'] > 0
    evicted = buf.sampler.probabilities(np.arange(80)) == 0
    assert evicted.sum() >= len(stale_seen)
    drawn2, _, info2 = buf.sample(2000, learner_version=10)
    assert not np.isin(drawn2, np.flatnonzero(evicted)).any()
    assert (info2['weights'][~info2['stale']] > 0).all()
    # Fresh items keep the priority law: all TD terms are equal, so fresh draws are uniform.
    hits = np.bincount(drawn2[np.isin(drawn2, fresh)] - 80, minlength=20)
    assert chi2_statistic(hits, np.full(20, hits.sum() / 20)) < chi2_critical(19)
    # An overwritten slot is live again.
    assert np.flatnonzero(evicted)[0] == 0
    buf.extend(make_batch(100, version=10))
    assert (buf.sampler.probabilities(np.arange(100)) > 0).all()


def test_staleness_skip_with_nothing_fresh_returns_zero_weights():
    buf = make_buffer(capacity=10, seed=10, staleness='skip', max_policy_lag=0)
    buf.extend(make_batch(10, version=0))
    drawn, batch, info = buf.sample(32, learner_version=3)
    assert len(drawn) == 32 and len(batch['obs']) == 32
    np.testing.assert_array_equal(info['weights'], 0.0)
    assert info['stale'].all()
    with pytest.raises(ValueError, match='no transition'):
        buf.sample(1, learner_version=3)


# ====================================================================== storage
def test_ring_wraps_and_overwrite_resets_count():
    buf = make_buffer(capacity=5, seed=12)
    np.testing.assert_array_equal(buf.extend(make_batch(3)), [0, 1, 2])
    for _ in range(20):
        buf.sample(8)
    buf.update_priority([0, 1, 2], [4.0, 0.2, 0.3])
    assert (buf.sampler.counts[:3] > 0).all()
    idx = buf.extend(make_batch(4, start=10.0))   # more than the 2 free slots
    np.testing.assert_array_equal(idx, [3, 4, 0, 1])
    assert len(buf) == 5
    np.testing.assert_array_equal(buf.storage.reward, [12, 13, 2, 10, 11])
    np.testing.assert_array_equal(buf.sampler.counts[[0, 1]], 0)   # overwritten
    assert buf.sampler.counts[2] > 0                                 # kept
    np.testing.assert_allclose(buf.sampler.priority([0, 1]),
                               0.6 * 4.0 + 0.4 + buf.cfg.eps)       # max |TD| enters
    np.testing.assert_array_equal(buf.storage.insert_id, [5, 6, 2, 3, 4])
    # A batch larger than the whole ring keeps its last `capacity` rows.
    idx = buf.extend(make_batch(12, start=100.0))
    np.testing.assert_array_equal(idx, (2 + np.arange(12)) % 5)
    np.testing.assert_array_equal(buf.storage.reward, [108, 109, 110, 111, 107])
    np.testing.assert_array_equal(buf.storage.obs[:, 0], buf.storage.reward)
    np.testing.assert_array_equal(buf.sampler.counts[:5], 0)
    assert buf.storage.added == 19 and len(buf) == 5
    assert_tree_invariants(buf.sampler)
    _, batch, _ = buf.sample(50)
    assert set(batch['reward'].tolist()) <= {107.0, 108.0, 109.0, 110.0, 111.0}


def test_storage_validates_batches():
    storage = ReplayStorage(8, OBS_DIM, ACT_DIM)
    batch = make_batch(4)
    with pytest.raises(KeyError, match='misses'):
        storage.extend({k: v for k, v in batch.items() if k != 'worker_id'})
    with pytest.raises(KeyError, match='unknown'):
        storage.extend(dict(batch, done=batch['terminated']))
    with pytest.raises(ValueError, match='shape'):
        storage.extend(dict(batch, obs=np.zeros((4, OBS_DIM + 1))))
    with pytest.raises(ValueError, match='rows'):
        storage.extend(dict(batch, reward=np.zeros(5)))
    with pytest.raises(ValueError, match='integers'):
        storage.extend(dict(batch, policy_version=np.zeros(4) + 0.5))
    # Scalars broadcast for per-batch fields; (n, 1) rewards are accepted.
    idx = storage.extend(dict(batch, policy_version=7, worker_id=3, reward=np.ones((4, 1))))
    np.testing.assert_array_equal(storage.policy_version[idx], 7)
    assert storage.extend(make_batch(1))[0] == 4
    for name, (dtype, _) in FIELDS.items():
        assert getattr(storage, name).dtype == dtype
    assert storage.policy_version.dtype == np.int64 and storage.worker_id.dtype == np.int32


# ====================================================================== state and threads
def test_state_dict_round_trip_restores_identical_sampling():
    buf = make_buffer(capacity=50, seed=13, staleness='skip', max_policy_lag=3)
    buf.extend(make_batch(40, version=np.arange(40) // 4))
    for _ in range(5):
        idx, _, _ = buf.sample(16, learner_version=10)
        buf.update_priority(idx, np.linspace(0, 2, 16))
    state = buf.state_dict()
    expected = [buf.sample(16, learner_version=12) for _ in range(5)]
    buf.extend(make_batch(30, start=99.0))     # the saved state must not alias the buffer
    restored = make_buffer(capacity=50, seed=999, staleness='skip', max_policy_lag=3)
    restored.load_state_dict(state)
    assert len(restored) == 40
    for idx, batch, info in expected:
        idx2, batch2, info2 = restored.sample(16, learner_version=12)
        np.testing.assert_array_equal(idx2, idx)
        np.testing.assert_array_equal(info2['weights'], info['weights'])
        for name in FIELDS:
            np.testing.assert_array_equal(batch2[name], batch[name])
    # A changed priority law is rebuilt from the saved TD errors and counts.
    other = make_buffer(capacity=50, seed=0, alpha=0.2, staleness='skip', max_policy_lag=3)
    other.load_state_dict(state)
    assert_tree_invariants(other.sampler)
    with pytest.raises(ValueError, match='capacity'):
        make_buffer(capacity=51).load_state_dict(state)


def test_same_seed_same_indices():
    runs = []
    for _ in range(2):
        buf = ReplayBuffer(ReplayConfig(capacity=64), OBS_DIM, ACT_DIM,
                           rng=np.random.default_rng(123))
        buf.extend(make_batch(64))
        runs.append(np.concatenate([buf.sample(32)[0] for _ in range(10)]))
    np.testing.assert_array_equal(runs[0], runs[1])


def test_update_priority_guards_recycled_slots_and_bad_values():
    buf = make_buffer(capacity=4, seed=14)
    buf.extend(make_batch(4))
    idx, _, info = buf.sample(4)
    buf.extend(make_batch(2, start=10.0))       # recycles slots 0 and 1
    recycled = np.isin(idx, [0, 1])
    assert buf.update_priority(idx, np.full(4, 0.25), info['insert_ids']) == (~recycled).sum()
    np.testing.assert_allclose(buf.sampler.priority([0, 1]), 0.6 + 0.4 + buf.cfg.eps)
    buf.update_priority([2, 3], [np.nan, np.inf])
    assert buf.stats()['nonfinite_td'] == 2
    assert np.isfinite(buf.sampler.sum_tree.total())
    assert_tree_invariants(buf.sampler)
    with pytest.raises(IndexError):
        buf.update_priority([4], [1.0])
    with pytest.raises(ValueError):
        buf.sampler.update_priority([0, 1], [1.0, 2.0, 3.0])


def test_thread_safety_smoke():
    """
    Four actors extend while the learner samples and updates.

    A tiny GIL switch interval makes the threads interleave inside the buffer's methods, so
    without the lock torn batches, lost slots or stale tree nodes show up here.
    """
    buf = make_buffer(capacity=500, seed=15, staleness='weight')
    buf.extend(make_batch(10, start=-10.0))
    errors: list[BaseException] = []
    stop = threading.Event()

    def actor(worker: int) -> None:
        try:
            for k in range(60):
                start = 10_000.0 * (worker + 1) + 16 * k
                buf.extend(make_batch(16, version=k // 10, worker=worker, start=start))
        except BaseException as exc:  # noqa: B902 - report any failure to the main thread
            errors.append(exc)

    def learner() -> None:
        try:
            version = 0
            while not stop.is_set() or version < 20:  # keep sampling however fast actors are
                idx, batch, info = buf.sample(32, learner_version=version)
                # Rows are whole transitions: obs and next_obs match the reward they came with.
                np.testing.assert_array_equal(batch['obs'][:, 0], batch['reward'])
                np.testing.assert_array_equal(batch['next_obs'][:, 0], batch['reward'] + 0.5)
                assert np.isfinite(info['weights']).all()
                buf.update_priority(idx, np.random.default_rng(version).random(32),
                                    info['insert_ids'])
                version += 1
        except BaseException as exc:  # noqa: B902
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        actors = [threading.Thread(target=actor, args=(w,)) for w in range(4)]
        consumer = threading.Thread(target=learner)
        consumer.start()
        for thread in actors:
            thread.start()
        for thread in actors:
            thread.join(timeout=60)
        stop.set()
        consumer.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    assert len(buf) == 500 and buf.storage.added == 10 + 4 * 60 * 16
    assert buf.stats()['sample_calls'] > 10
    assert_tree_invariants(buf.sampler)
    # The ring holds exactly the 500 newest transitions, each once.
    added = buf.storage.added
    np.testing.assert_array_equal(np.sort(buf.storage.insert_id), np.arange(added - 500, added))
    assert set(np.unique(buf.storage.worker_id).tolist()) <= {0, 1, 2, 3}
    np.testing.assert_array_equal(buf.storage.obs[:, 0], buf.storage.reward)


def test_sampling_speed_at_full_capacity():
    """Sample 256 from 10^6 transitions; a generous bound that only catches O(n) regressions."""
    capacity = 1_000_000
    buf = make_buffer(capacity=capacity)
    chunk = make_batch(250_000)
    for _ in range(4):
        buf.extend(chunk)
    assert len(buf) == capacity
    times = []
    for _ in range(30):
        start = time.perf_counter()
        idx, _, _ = buf.sample(256)
        times.append(time.perf_counter() - start)
        buf.update_priority(idx, np.ones(256))
    assert np.median(times) < 0.01   # s; about 3e-4 s on one core of a 2020 laptop
