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
The learner's side of the delayed update: commit to the parameter server, encode for workers.

Every ``commit_every`` optimizer steps the runner calls :meth:`PolicyPublisher.publish`: the
actor's change since the last commit goes to the (sharded, replicated) parameter server, which
bumps the version; the server's weights are read back and encoded as a full int8 packet with
the normalizer statistics and a CRC. What carries the packet to the workers -- shared memory,
a ROS topic -- is the caller's business.
"""

from __future__ import annotations

import dataclasses
import time

from async_rl_ros.core.config import CodecConfig, ParameterServerConfig
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.weights.codec import encode_policy_state, WeightEncoder
from async_rl_ros.core.weights.parameter_server import CommitAccumulator, ParameterServer
import numpy as np
import torch

__all__ = ['PolicyPublisher']


class PolicyPublisher:
    """
    Delayed commits of a learner's actor and the packets workers receive.

    :param learner: the learner whose actor is published; its ``policy_version`` follows the
        server's version.
    :param server_cfg: shards, replicas, ring, ``commit_every``.
    :param codec_cfg: weight codec settings (packets are always full: workers may skip some).
    """

    def __init__(self, learner: Learner, server_cfg: ParameterServerConfig,
                 codec_cfg: CodecConfig):
        self.learner = learner
        actor = self._actor()
        self.server = ParameterServer(server_cfg)
        self.server.initialize(actor, version=learner.policy_version)
        self.accumulator = CommitAccumulator(server_cfg.commit_every, actor)
        self.encoder = WeightEncoder(dataclasses.replace(codec_cfg, delta=False))
        self.published_version = -1
        self.packets = 0
        self.bytes_published = 0
        self.seconds = 0.0  # time spent committing, reading and encoding

    def _actor(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().astype(np.float32)
                for k, v in self.learner.sac.actor.state_dict().items()}

    def publish(self) -> tuple[int, bytes] | None:
        """
        Commit the accumulated change and return ``(version, packet)`` to broadcast.

        :returns: ``None`` when there is nothing new, or when the training doctor refuses
            non-finite weights (workers then keep acting with the last good ones).
        """
        start = time.perf_counter()
        try:
            state = self.learner.policy_state()
            if state is None:
                return None  # never commit what the doctor refuses to hand out
            delta = self.accumulator.flush(self._actor())
            if delta is not None:
                self.learner.policy_version = self.server.commit(delta, self.server.version)
            if self.server.version == self.published_version:
                return None
            version, actor = self.server.read()
            served = dataclasses.replace(
                state, actor={k: torch.from_numpy(v) for k, v in actor.items()}, version=version)
            packet = encode_policy_state(self.encoder, served).to_bytes()
            self.published_version = version
            self.packets += 1
            self.bytes_published += len(packet)
            return version, packet
        finally:
            self.seconds += time.perf_counter() - start
