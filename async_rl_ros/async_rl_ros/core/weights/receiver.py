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
Shard boards and the worker's receiver: the weight path's ends, whatever carries the bytes.

A shard serves on two *boards*, latest-value slots of serialized
:class:`~async_rl_ros.core.weights.shard_packet.ShardPacket` s: ``latest`` (a keyframe or a
delta on one) and ``keyframe`` (the base of ``latest``). A board is anything with
``publish(data, version)``, ``version``, ``poll()`` and ``read()``: a shared-memory
:class:`~async_rl_ros.local.weight_board.WeightBoard` between processes, a
:class:`MemoryBoard` in one process. :class:`ShardOutlet` posts what a
:class:`~async_rl_ros.core.weights.sharded_weights.ShardReplica` serves, keyframe first;
:class:`WeightReceiver` reads the boards as a worker does and assembles its policy;
:class:`InProcessWeightPath` wires committer, replicas and boards by plain calls
(single-process training), so every runner sends its workers the same packets.

A receiver is told what its worker expects (an
:class:`~async_rl_ros.core.weights.expect.Expectation`: its own policy's layout, the shard
count, bounds) and every packet is checked against it before anything is allocated or changed;
every packet it does not use is counted, as rejected or ignored, by reason.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Iterable, Mapping, Sequence

from async_rl_ros.core.config import CodecConfig, ParameterServerConfig
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights.assembler import ShardAssembler
from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.core.weights.expect import Expectation
from async_rl_ros.core.weights.sharded_weights import ShardedCommitter, ShardPacket, ShardReplica

__all__ = ['MemoryBoard', 'ShardOutlet', 'WeightReceiver', 'InProcessWeightPath',
           'weights_summary', 'Expectation']


class MemoryBoard:
    """
    A latest-value slot in this process: the in-memory twin of a shared-memory board.

    The writer calls :meth:`publish`; every reader takes its own :meth:`view`, which keeps
    its own record of the versions it polled (as each process's attached board does).
    """

    def __init__(self):
        self._slot: tuple[int, Any] | None = None  # replaced in one assignment: thread-safe

    def publish(self, data: Any, version: int) -> None:
        """Replace the packet on the board (bytes, or a message the receiver parses)."""
        self._slot = (int(version), data)

    @property
    def version(self) -> int:
        """Return the version on the board (-1: empty)."""
        slot = self._slot
        return -1 if slot is None else slot[0]

    def read(self) -> tuple[int, Any] | None:
        """Return ``(version, packet)``, seen or not (``None`` when empty)."""
        return self._slot

    def view(self) -> '_BoardView':
        """Return a reader's view of the board."""
        return _BoardView(self)


class _BoardView:
    """
    One reader's view of a :class:`MemoryBoard`.

    A packet is new when it is another publication than the last one polled, whatever its
    version says: a forged version must not hide the packets after it, and a restarted learner
    publishes lower versions (the receiver judges versions, with the run id).
    """

    def __init__(self, board: MemoryBoard):
        self.board, self.seen_version = board, -1
        self._seen: tuple[int, Any] | None = None

    @property
    def version(self) -> int:
        """Return the version on the board."""
        return self.board.version

    def poll(self) -> tuple[int, Any] | None:
        """Return ``(version, packet)`` if published since the last poll, else ``None``."""
        got = self.board.read()
        if got is None or got is self._seen:
            return None
        self._seen, self.seen_version = got, got[0]
        return got

    def read(self) -> tuple[int, Any] | None:
        """Return ``(version, packet)``, seen or not."""
        return self.board.read()

    def close(self) -> None:
        """Nothing to release."""


class ShardOutlet:
    """
    One shard's pair of boards: posts what its replica serves, the keyframe first.

    :param latest: the board of the newest packet.
    :param keyframe: the board of the keyframe that packet is based on.
    :param encode: what a board takes for a packet (default: its bytes; a ROS shard node's
        boards are its two topics and take ``PolicyWeights`` messages).
    """

    def __init__(self, latest: Any, keyframe: Any,
                 encode: Callable[[ShardPacket], Any] = ShardPacket.to_bytes):
        self.latest, self.keyframe, self.encode = latest, keyframe, encode
        self._written: ShardPacket | None = None
        self._written_key: ShardPacket | None = None

    def post(self, replica: ShardReplica) -> bool:
        """Post the replica's current packet if it is new; return whether one was posted."""
        served = replica.serve()
        if served is None or served is self._written:
            return False
        key = replica.keyframe()
        if key is not self._written_key:  # first: a reader of the delta may need it at once
            self.keyframe.publish(self.encode(key), key.packet.version)
            self._written_key = key
        self.latest.publish(self.encode(served), served.packet.version)
        self._written = served
        return True


class WeightReceiver:
    """
    Worker side: read every shard's boards and assemble the policy.

    Each :meth:`poll` reads the boards newest version first and stops as soon as a policy is
    assembled, so with replicas a worker usually reads one shard's packet per version. A shard
    whose current keyframe the worker holds counts as one version newer than it is: a keyframe
    costs several deltas, so the worker rather waits one poll for that shard than fetch
    another's keyframe. A shard that stops serving falls behind and the replicas' boards are
    read instead. A delta whose keyframe is not on the keyframe board yet (the two boards are
    separate topics of a network transport, and a lossy link can deliver the delta first) is
    kept, not rejected, and applied at a later poll once its keyframe is there, unless a newer
    packet of that shard comes first.

    :param boards: ``(latest, keyframe)`` boards per shard.
    :param obs_dim: the observation width the policy must take (not checked when ``None``).
    :param parse: turns what a board holds into a :class:`ShardPacket` (default: serialized
        bytes; a ROS worker's boards hold ``PolicyWeights`` messages), raising
        :class:`CodecError` for what it cannot read.
    :param expect: what the worker expects of a packet, its own policy's layout first
        (:meth:`Expectation.of_policy`); default: bounds only, the first layout pinned.
    """

    def __init__(self, boards: Sequence[tuple[Any, Any]], obs_dim: int | None = None,
                 parse: Callable[[Any], ShardPacket] = ShardPacket.from_bytes,
                 expect: Expectation | None = None):
        self.boards = [tuple(pair) for pair in boards]
        self.obs_dim = obs_dim
        self.parse = parse
        self.expect = expect
        self.assembler = ShardAssembler(obs_dim, expect)
        self.ignored: collections.Counter[str] = collections.Counter()  # and the assembler's
        self.bytes_received = 0
        self.bytes_delta = 0  # of bytes_received, in delta packets
        self.full_packets = 0
        self.delta_packets = 0
        self.resyncs = 0  # keyframes fetched because a delta's base was missing
        self.unreadable = 0  # board contents that did not parse (counted as rejected)
        self._waiting: dict[int, ShardPacket] = {}  # per shard: a delta before its keyframe

    @property
    def version(self) -> int:
        """Return the version of the last policy assembled (-1: none yet)."""
        return self.assembler.version

    @property
    def accepted(self) -> int:
        """Return the shard packets accepted."""
        return self.assembler.accepted

    @property
    def rejected(self) -> int:
        """Return the shard packets rejected: CRC, versions, shapes, extras, unparsable."""
        return self.assembler.rejected_total + self.unreadable

    def ignored_counts(self) -> collections.Counter[str]:
        """Return the packets read but not used nor rejected, by reason (``'stale'``, ...)."""
        return self.ignored + self.assembler.ignored

    def rejections(self) -> collections.Counter[str]:
        """Return the packets rejected so far by reason (``'crc'``, ``'version'``, ...)."""
        counts = collections.Counter(self.assembler.rejected)
        for decoder in self.assembler.decoders.values():
            counts.update(decoder.rejected)
        if self.unreadable:
            counts['unreadable'] = self.unreadable
        return counts

    def poll(self) -> PolicyState | None:
        """
        Return the newest policy if one newer than the last returned is complete, else ``None``.

        Bad packets are counted and skipped: the caller keeps acting with its last policy.
        """
        decoders = self.assembler.decoders
        holds = [i in decoders and decoders[i].key_version == key.version >= 0
                 for i, (_, key) in enumerate(self.boards)]  # this shard's current keyframe
        versions = [latest.version + holds[i] for i, (latest, _) in enumerate(self.boards)]
        order = sorted(range(len(self.boards)), key=lambda i: (-versions[i], not holds[i], i))
        fallback = None
        floor = min((d.key_version for d in decoders.values()), default=-1)
        for i in order:
            latest, key = self.boards[i]
            got = latest.poll()
            if got is not None and floor <= got[0] <= self.assembler.version:
                # a replica's copy or a lagging shard's packet: counted, not parsed (one
                # below every keyframe held is parsed: a restarted learner's new run)
                self.ignored['same_version' if got[0] == self.assembler.version
                             else 'older'] += 1
                got = None
            packet = None if got is None else self._parse(got[1])
            waiting = self._waiting.pop(i, None)  # a newer packet of the shard replaces it
            if packet is not None and waiting is not None:
                self.ignored['superseded'] += 1
            if packet is None:
                packet = waiting
                if packet is None:
                    continue  # nothing newer than the policy on this board
                if (packet.packet.version <= self.assembler.version
                        and packet.run_id == self.assembler.run_id):
                    self.ignored['stale'] += 1
                    continue
            if self.assembler.lacks_base(packet):
                base = key.read()
                if base is None or base[0] != packet.packet.base_version:
                    try:  # a bad one is not held: counted
                        self.assembler.screen(packet, waiting=True)
                    except CodecError:
                        continue
                    self._waiting[i] = packet  # its keyframe is still on the way
                    continue
                self.resyncs += 1
                fallback = self._add(self._parse(base[1])) or fallback
            state = self._add(packet)
            if state is not None:
                return state
        return fallback

    def _parse(self, data: Any) -> ShardPacket | None:
        if data is None:
            return None
        try:
            packet = self.parse(data)
        except CodecError:
            self.unreadable += 1
            return None
        # a message's payload: what its packet weighs serialized
        nbytes = len(data if isinstance(data, bytes) else packet.to_bytes())
        self.bytes_received += nbytes
        if packet.packet.is_delta:
            self.delta_packets += 1
            self.bytes_delta += nbytes
        else:
            self.full_packets += 1
        return packet

    def _add(self, packet: ShardPacket | None) -> PolicyState | None:
        if packet is None:
            return None
        try:
            return self.assembler.add(packet)
        except CodecError:
            return None  # counted by the assembler

    def stats(self) -> dict[str, int]:
        """Return the counters as metrics."""
        return {'weights/version': self.version, 'weights/accepted': self.accepted,
                'weights/rejected': self.rejected,
                'weights/ignored': sum(self.ignored_counts().values()),
                'weights/bytes_received': self.bytes_received,
                'weights/bytes_delta': self.bytes_delta,
                'weights/full_packets': self.full_packets,
                'weights/delta_packets': self.delta_packets, 'weights/resyncs': self.resyncs}

    def close(self) -> None:
        """Detach from the boards."""
        for latest, key in self.boards:
            latest.close()
            key.close()


class InProcessWeightPath:
    """
    Committer, shard replicas and their boards in this process (single-process training).

    :param ps_cfg: shards, replicas, ring, chunk size.
    :param codec_cfg: codec of the packets the shards serve.
    :param initial: the policy state the shards start from.
    """

    def __init__(self, ps_cfg: ParameterServerConfig, codec_cfg: CodecConfig,
                 initial: PolicyState):
        self.committer = ShardedCommitter(ps_cfg, initial)
        n = ps_cfg.num_shards
        self.replicas = [ShardReplica(i, n, codec_cfg) for i in range(n)]
        self.boards = [(MemoryBoard(), MemoryBoard()) for _ in range(n)]
        self.outlets = [ShardOutlet(*pair) for pair in self.boards]
        for i in range(n):
            self._apply(self.committer.full(i))

    @property
    def version(self) -> int:
        """Return the version of the last commit."""
        return self.committer.version

    def _apply(self, packet: ShardPacket) -> None:
        self.replicas[packet.shard_id].apply(packet)
        self.outlets[packet.shard_id].post(self.replicas[packet.shard_id])

    def publish(self, state: PolicyState) -> int | None:
        """Commit ``state`` to every shard; return its version (``None``: nothing committed)."""
        packets = self.committer.commit(state)
        if packets is None:
            return None
        for packet in packets:
            self._apply(packet)
        return self.committer.version

    def receiver(self, obs_dim: int | None = None, expect: Expectation | None = None
                 ) -> WeightReceiver:
        """
        Return a receiver reading this path's boards (its own read positions).

        :param obs_dim: the observation width the policy must take.
        :param expect: what the worker expects (default: this path's layout and shard count).
        """
        if expect is None:
            expect = Expectation(self.committer.layout, obs_dim, len(self.boards))
        return WeightReceiver([(a.view(), b.view()) for a, b in self.boards], obs_dim,
                              expect=expect)

    def stats(self) -> dict[str, float]:
        """Return the committer's counters as metrics."""
        return {'weights/version': self.committer.version,
                'weights/commits': self.committer.commits,
                'weights/refused': self.committer.refused}


def weights_summary(received: Iterable[Mapping[str, Any]], fp32_bytes: int) -> dict[str, Any]:
    """
    Return the ``weights_*`` figures of ``summary.json`` from workers' receiver statistics.

    :param received: per worker, :meth:`WeightReceiver.stats` plus ``policies`` (the
        policies it assembled).
    :param fp32_bytes: bytes of the float32 actor.
    """
    received = [s for s in received if s.get('policies')]
    policies = sum(s['policies'] for s in received)
    nbytes = sum(s['weights/bytes_received'] for s in received)
    return {
        'weights_policies_received': policies,
        'weights_packets': sum(s['weights/full_packets'] + s['weights/delta_packets']
                               for s in received),
        'weights_delta_packets': sum(s['weights/delta_packets'] for s in received),
        'weights_resyncs': sum(s['weights/resyncs'] for s in received),
        'weights_bytes_mean': nbytes / policies if policies else None,
        'weights_fp32_bytes': fp32_bytes,
        # what a worker received per policy it assembled, against the fp32 actor
        'weights_reduction': 1.0 - nbytes / policies / fp32_bytes if policies else None}
