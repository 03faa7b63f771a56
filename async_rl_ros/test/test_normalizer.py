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

"""Running observation statistics."""

from async_rl_ros.core.learning.normalizer import RunningNormalizer
import numpy as np


def test_batched_updates_equal_the_statistics_of_all_data():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4)) * np.array([1.0, 10.0, 0.1, 1.0])
    norm = RunningNormalizer(4)
    for chunk in np.array_split(data, [1, 7, 300, 301, 650]):
        norm.update(chunk)
    assert norm.count == 1000
    np.testing.assert_allclose(norm.mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(norm.std, data.std(axis=0), rtol=1e-10)
    z = norm.normalize(data)
    assert z.dtype == np.float32
    np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(z.std(axis=0), 1.0, atol=1e-5)


def test_constant_dimensions_and_outliers_stay_bounded():
    norm = RunningNormalizer(2, clip=5.0, min_std=0.01)
    norm.update(np.array([[1.0, 0.0]] * 10))
    np.testing.assert_allclose(norm.std, [0.01, 0.01])
    assert np.all(np.abs(norm.normalize(np.array([1e6, -1e6]))) <= 5.0)


def test_state_round_trip():
    norm = RunningNormalizer(3)
    norm.update(np.random.default_rng(1).normal(size=(50, 3)))
    copy = RunningNormalizer(3)
    copy.load_state_dict(norm.state_dict())
    x = np.ones(3)
    np.testing.assert_array_equal(copy.normalize(x), norm.normalize(x))
