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
Policy weights from the learner to worker processes through shared memory.

The learner side encodes each committed policy state as a CRC-checked int8 packet and writes
it to a :class:`~async_rl_ros.local.weight_board.WeightBoard`; every worker polls the board
and decodes the newest packet into a :class:`~async_rl_ros.core.records.PolicyState`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from async_rl_ros.core.config import CodecConfig, ParameterServerConfig
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights.codec import CodecError, encode_policy_state, WeightDecoder
from async_rl_ros.core.weights.codec import WeightEncoder
from async_rl_ros.local.weight_board import WeightBoard

__all__ = ['LocalWeightPath', 'LocalWeightReceiver']


@dataclasses.dataclass
class _WorkerSide:
    board: str

    def receiver(self) -> 'LocalWeightReceiver':
        return LocalWeightReceiver(self.board)


class LocalWeightPath:
    """
    Learner side: versioned packets on a shared-memory board.

    :param ps_cfg: the parameter-server section.
    :param codec_cfg: the weight codec.
    :param initial: the first policy state (its layout).
    :param ctx: the multiprocessing context of the workers.
    """

    def __init__(self, ps_cfg: ParameterServerConfig, codec_cfg: CodecConfig,
                 initial: PolicyState, ctx: Any):
        self.encoder = WeightEncoder(dataclasses.replace(codec_cfg, delta=False))
        self.board = WeightBoard(capacity=8 << 20)
        self.version = initial.version
        self.packets = 0
        self.bytes = 0

    def worker_side(self) -> _WorkerSide:
        """Return what a worker process needs to attach (picklable)."""
        return _WorkerSide(self.board.name)

    def publish(self, state: PolicyState) -> int:
        """Encode ``state`` as the next version and put it on the board."""
        self.version += 1
        packet = encode_policy_state(self.encoder, dataclasses.replace(state,
                                                                       version=self.version))
        data = packet.to_bytes()
        self.board.publish(data, self.version)
        self.packets += 1
        self.bytes += len(data)
        return self.version

    def maintain(self) -> None:
        """Nothing to maintain."""

    def stats(self) -> dict[str, float]:
        """Return packet counters."""
        return {'packets': self.packets, 'bytes': self.bytes}

    def summary(self) -> dict[str, Any]:
        """Return the figures of ``summary.json``."""
        return {'weights_packets': self.packets}

    def close(self) -> None:
        """Remove the board."""
        self.board.close()


class LocalWeightReceiver:
    """Worker side: poll the board, decode, return new policy states."""

    def __init__(self, board: str):
        self.board = WeightBoard(board)
        self.decoder = WeightDecoder()

    @property
    def rejected(self) -> int:
        """Return the packets rejected."""
        return sum(self.decoder.rejected.values())

    def poll(self, on_reject: Callable[[str], None] | None = None) -> PolicyState | None:
        """Return a newer policy state if one arrived."""
        polled = self.board.poll()
        if polled is None:
            return None
        try:
            self.decoder.apply_bytes(polled[1])
            return self.decoder.policy_state()
        except CodecError as exc:
            if on_reject is not None:
                on_reject(exc.reason)
            return None

    def close(self) -> None:
        """Detach from the board."""
        self.board.close()
