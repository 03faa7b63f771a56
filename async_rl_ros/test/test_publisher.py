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

"""The learner's publisher: delayed commits through the parameter server, int8 packets."""

from async_rl_ros.core.config import CodecConfig, LearnerConfig, ParameterServerConfig
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.weights.codec import WeightDecoder
from async_rl_ros.core.weights.publisher import PolicyPublisher
import numpy as np
import torch


def make(tmp_path):
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': [32, 32],
                                     'checkpoint.directory': str(tmp_path)})
    learner = Learner(cfg, 21, 6)
    return learner, PolicyPublisher(learner, ParameterServerConfig(), CodecConfig())


def test_each_change_is_one_version_and_workers_decode_the_server_weights(tmp_path):
    learner, publisher = make(tmp_path)
    decoder = WeightDecoder()
    version, packet = publisher.publish()
    assert version == 0
    decoder.apply_bytes(packet)
    assert publisher.publish() is None  # nothing changed since
    with torch.no_grad():
        for p in learner.sac.actor.parameters():
            p.add_(0.01)
    version, packet = publisher.publish()
    assert version == 1 == learner.policy_version == publisher.server.version
    decoder.apply_bytes(packet)
    state = decoder.policy_state()
    assert state.version == 1
    _, server = publisher.server.read()
    for name, value in learner.sac.actor.state_dict().items():
        np.testing.assert_allclose(server[name], value.numpy(), atol=1e-6)
        step = np.abs(server[name]).max() / 127 + 1e-12
        assert np.abs(state.actor[name].numpy() - server[name]).max() <= step
    assert publisher.packets == 2 and publisher.bytes_published > 0


def test_non_finite_weights_are_neither_committed_nor_published(tmp_path):
    learner, publisher = make(tmp_path)
    publisher.publish()
    with torch.no_grad():
        next(learner.sac.actor.parameters())[0, 0] = float('nan')
    assert publisher.publish() is None
    assert publisher.server.version == 0
