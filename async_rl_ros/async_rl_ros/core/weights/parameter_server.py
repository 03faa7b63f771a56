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
Sharded, replicated parameter server with delayed (every ``commit_every`` steps) updates.

Layout. The flattened float32 tensors of the model are cut into :class:`Partition` s of at
most ``chunk_size`` floats (:func:`partition_layout`), so a big layer spreads over several
shards. Partition keys are ``'<tensor name>#<chunk index>'`` (``'actor/trunk.0.weight#3'``),
independent of the order of the tensors. A :class:`~async_rl_ros.core.weights.hash_ring.HashRing`
with virtual nodes maps each key to ``replicas`` distinct shards (the primary and the next
distinct shards clockwise); every replica stores the whole partition.

Objects. :class:`ParameterShard` is one storage node (a ROS 2 node per shard later): float32
arrays and a version per partition, and an ``alive`` flag that simulates a crashed process
(a dead shard answers every call with :class:`ShardUnavailableError`).
:class:`ParameterServer` is the cluster seen by the learner and the actors: it owns the ring
and the shards, routes commits and reads, fails over to replicas and rebalances on membership
changes. Nothing here starts a thread or does I/O; one re-entrant lock serializes commits,
reads and membership changes, so a reader never sees a half-applied commit. The transports (a
local-process runner, ROS 2 services) wrap these objects; the int8 codec plugs in at that
layer, so everything here works on float32 numpy arrays.

Versions. The cluster version starts at the version given to
:meth:`ParameterServer.initialize` and grows by exactly one per commit. Every replica of every
partition carries the version of the model state its values belong to, so after a commit all
live replicas are at the cluster version; a shard refuses any write that would lower a
partition's version.

Delayed update (the design's lock-free scheme). The learner does not publish every optimizer
step: :class:`CommitAccumulator` hands out the accumulated change ``current - reference``
every ``commit_every`` steps (default 8; ``commit_every = 1`` measures the cost of per-step
commits), and :meth:`ParameterServer.commit` applies it to every live replica and bumps the
version. The learner is the single writer, so a commit must name the version it was computed
against (``base_version``): a commit whose base is not the current version is rejected with
:class:`StaleCommitError` rather than rebased, because a stale base can only mean that the
learner lost track of the server (a restart, a lost acknowledgement). It then re-reads the
server, calls :meth:`CommitAccumulator.acknowledge` with what it read, and goes on.

Failures. Reads take each partition from the first live replica in ring order. A commit
needs a live replica of every partition and is refused, before anything changes, if some
partition has none (:class:`PartitionUnavailableError`); commits skip dead replicas, which
re-sync from a live replica in :meth:`ParameterServer.recover_shard`. A shard that dies keeps
its memory (its disk): if no live peer holds one of its partitions when it comes back, its
own copy is still current, because no commit could have happened without a live replica.
:meth:`ParameterServer.add_shard` and :meth:`ParameterServer.remove_shard` move only the
partitions whose replica set the ring changes (copy to the newcomers, drop from the leavers)
and refuse, leaving everything as it was, a change that would leave a partition without a
live current copy.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Iterable, Mapping, Sequence

from async_rl_ros.core.config import ParameterServerConfig
from async_rl_ros.core.weights.hash_ring import HashRing
import numpy as np

__all__ = [
    'ParameterServerConfig',
    'ParameterServerError',
    'VersionError',
    'StaleCommitError',
    'ShardUnavailableError',
    'PartitionUnavailableError',
    'Partition',
    'partition_layout',
    'ParameterShard',
    'Rebalance',
    'ParameterServer',
    'CommitAccumulator',
]

_INT32_MAX = 2**31 - 1


# ====================================================================== errors
class ParameterServerError(RuntimeError):
    """Base class of the parameter-server errors."""


class VersionError(ParameterServerError):
    """A write would make a version go backwards (versions are monotonic)."""


class StaleCommitError(VersionError):
    """A commit was computed against another version than the server's current one."""


class ShardUnavailableError(ParameterServerError):
    """A dead shard was called (it cannot answer until it is recovered)."""


class PartitionUnavailableError(ParameterServerError):
    """Every replica of a partition is dead: it can be neither read nor updated."""


# ====================================================================== layout
@dataclasses.dataclass(frozen=True)
class Partition:
    """
    A contiguous chunk ``[start, stop)`` of one flattened tensor.

    :param key: ``'<tensor>#<chunk index>'``, the key placed on the hash ring.
    :param tensor: the tensor name.
    :param start: first flat index (inclusive).
    :param stop: last flat index (exclusive).
    """

    key: str
    tensor: str
    start: int
    stop: int

    @property
    def size(self) -> int:
        """Return the number of floats in the partition."""
        return self.stop - self.start


def partition_layout(shapes: Mapping[str, Sequence[int]], chunk: int) -> list[Partition]:
    """
    Cut every flattened tensor into partitions of at most ``chunk`` floats.

    A tensor of ``n`` floats gets ``ceil(n / chunk)`` partitions (one empty partition when
    ``n == 0``, so it still exists on the shards). Keys depend only on the tensor name and the
    chunk index, never on the order of ``shapes``.

    :param shapes: tensor name -> shape.
    :param chunk: largest partition, in floats (>= 1).
    :returns: the partitions, tensor by tensor in the order of ``shapes``.
    """
    if int(chunk) != chunk or chunk < 1:
        raise ValueError(f'chunk must be an integer >= 1, got {chunk!r}')
    chunk = int(chunk)
    layout: list[Partition] = []
    for name, shape in shapes.items():
        size = int(np.prod(tuple(shape), dtype=np.int64))
        starts = range(0, size, chunk) if size else range(1)
        for index, start in enumerate(starts):
            layout.append(Partition(f'{name}#{index}', name, start, min(start + chunk, size)))
    return layout


def _as_float32(values: Any, what: str) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in 'fiub':
        raise TypeError(f'{what}: expected numbers, got dtype {array.dtype}')
    return np.asarray(array, dtype=np.float32, order='C')


# ====================================================================== shard
class ParameterShard:
    """
    One storage node: float32 values and a version per partition it holds.

    :param shard_id: the shard's name (its node id on the hash ring).
    """

    def __init__(self, shard_id: str):
        self.shard_id = shard_id
        #: ``False`` simulates a crashed process: every data call raises.
        self.alive = True
        self._partitions: dict[str, Partition] = {}
        self._values: dict[str, np.ndarray] = {}
        self._versions: dict[str, int] = {}

    def _require_alive(self) -> None:
        if not self.alive:
            raise ShardUnavailableError(f'shard {self.shard_id!r} is down')

    def _require(self, key: str) -> None:
        if key not in self._values:
            raise KeyError(f'shard {self.shard_id!r} does not hold partition {key!r}')

    # ------------------------------------------------------------------ introspection
    @property
    def keys(self) -> tuple[str, ...]:
        """Return the keys of the partitions held, sorted."""
        return tuple(sorted(self._values))

    def __contains__(self, key: object) -> bool:
        """Return whether the shard holds partition ``key``."""
        return key in self._values

    def __len__(self) -> int:
        """Return the number of partitions held."""
        return len(self._values)

    def version_of(self, key: str) -> int:
        """
        Return the version of a partition held (readable even while the shard is down).

        :param key: a partition key.
        :returns: the version of the model state its values belong to.
        """
        self._require(key)
        return self._versions[key]

    @property
    def nbytes(self) -> int:
        """Return the bytes of parameter values held."""
        return sum(v.nbytes for v in self._values.values())

    # ------------------------------------------------------------------ data
    def load(self, partition: Partition, values: np.ndarray, version: int) -> None:
        """
        Store (or overwrite) a partition's values.

        :param partition: the partition.
        :param values: its ``partition.size`` floats (any shape; copied as float32).
        :param version: the version of the values; must not be below the version held.
        :raises VersionError: if ``version`` is older than the one held.
        """
        self._require_alive()
        flat = _as_float32(values, partition.key).reshape(-1)
        if flat.size != partition.size:
            raise ValueError(f'partition {partition.key!r} has {partition.size} floats, got '
                             f'{flat.size}')
        held = self._versions.get(partition.key)
        if held is not None and version < held:
            raise VersionError(f'shard {self.shard_id!r}: loading partition {partition.key!r} '
                               f'at version {version} would go back from version {held}')
        self._partitions[partition.key] = partition
        self._values[partition.key] = flat.copy()
        self._versions[partition.key] = int(version)

    def apply(self, partition_key: str, delta: np.ndarray | None, version: int) -> None:
        """
        Add a delta to a partition and advance its version.

        :param partition_key: a partition held.
        :param delta: the change, ``size`` floats; ``None`` advances the version only (the
            partition is unchanged in that commit).
        :param version: the new version; must be greater than the version held.
        :raises VersionError: if ``version`` is not greater than the version held.
        """
        self._require_alive()
        self._require(partition_key)
        held = self._versions[partition_key]
        if version <= held:
            raise VersionError(f'shard {self.shard_id!r}: version {version} of partition '
                               f'{partition_key!r} is not newer than the held version {held}')
        if delta is not None:
            flat = _as_float32(delta, partition_key).reshape(-1)
            values = self._values[partition_key]
            if flat.size != values.size:
                raise ValueError(f'delta for partition {partition_key!r} has {flat.size} '
                                 f'floats, expected {values.size}')
            values += flat
        self._versions[partition_key] = int(version)

    def read(self, keys: Iterable[str] | None = None) -> dict[str, tuple[np.ndarray, int]]:
        """
        Return copies of some partitions with their versions.

        :param keys: partition keys; all held partitions when ``None``.
        :returns: ``{key: (float32 values, version)}``.
        """
        self._require_alive()
        wanted = self.keys if keys is None else list(keys)
        for key in wanted:
            self._require(key)
        return {key: (self._values[key].copy(), self._versions[key]) for key in wanted}

    def drop(self, key: str) -> None:
        """
        Forget a partition (it moved to another shard); a no-op if it is not held.

        :param key: a partition key.
        """
        self._partitions.pop(key, None)
        self._values.pop(key, None)
        self._versions.pop(key, None)

    def clear(self) -> None:
        """Forget every partition."""
        self._partitions.clear()
        self._values.clear()
        self._versions.clear()

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """
        Return the shard's state (copies), e.g. for a checkpoint.

        :returns: ``{'shard_id', 'alive', 'partitions': {key: {'tensor', 'start', 'stop',
            'values', 'version'}}}``.
        """
        return {
            'shard_id': self.shard_id,
            'alive': self.alive,
            'partitions': {
                key: {'tensor': part.tensor, 'start': part.start, 'stop': part.stop,
                      'values': self._values[key].copy(), 'version': self._versions[key]}
                for key, part in sorted(self._partitions.items())},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """
        Restore a state returned by :meth:`state_dict` (replacing everything held).

        :param state: the saved state.
        """
        self.clear()
        self.alive = bool(state.get('alive', True))
        for key, item in state['partitions'].items():
            part = Partition(key, item['tensor'], int(item['start']), int(item['stop']))
            self._partitions[key] = part
            self._values[key] = _as_float32(item['values'], key).reshape(-1).copy()
            self._versions[key] = int(item['version'])


# ====================================================================== cluster
@dataclasses.dataclass(frozen=True)
class Rebalance:
    """
    What a membership change moved.

    :param moved: partitions whose replica set changed.
    :param copied: replicas copied to a shard that newly holds a partition.
    :param dropped: replicas deleted from a shard that no longer holds a partition.
    """

    moved: int
    copied: int
    dropped: int


class ParameterServer:
    """
    The parameter-server cluster: shards, hash ring, commits, failover and rebalancing.

    :param cfg: the configuration (defaults when ``None``).
    :param shard_ids: names of the initial shards (then ``cfg.num_shards`` is not used);
        ``cfg.num_shards`` shards named ``'shard_0'``, ``'shard_1'``, ... when ``None``.
    """

    def __init__(self, cfg: ParameterServerConfig | None = None,
                 shard_ids: Sequence[str] | None = None):
        self.cfg = cfg if cfg is not None else ParameterServerConfig()
        self.cfg.validate()
        if shard_ids is None:
            shard_ids = [f'shard_{i}' for i in range(self.cfg.num_shards)]
        if not shard_ids:
            raise ValueError('a parameter server needs at least one shard')
        if len(set(shard_ids)) != len(shard_ids):
            raise ValueError(f'duplicate shard ids in {list(shard_ids)}')
        self._lock = threading.RLock()
        self._ring = HashRing(self.cfg.virtual_nodes)
        self._shards: dict[str, ParameterShard] = {}
        for shard_id in shard_ids:
            self._ring.add_node(shard_id)
            self._shards[shard_id] = ParameterShard(shard_id)
        self._layout: list[Partition] = []
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._assignment: dict[str, list[str]] = {}
        self._version: int | None = None
        self._commits = 0
        self._delta_bytes = 0

    # ------------------------------------------------------------------ introspection
    @property
    def version(self) -> int | None:
        """Return the current version, ``None`` before :meth:`initialize`."""
        return self._version

    @property
    def ring(self) -> HashRing:
        """Return the hash ring; read it only, membership changes go through the server."""
        return self._ring

    @property
    def layout(self) -> list[Partition]:
        """Return the partitions, in layout order."""
        return list(self._layout)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Return the tensor shapes the server was initialized with."""
        return dict(self._shapes)

    @property
    def shard_ids(self) -> tuple[str, ...]:
        """Return the shard ids, sorted."""
        return tuple(sorted(self._shards))

    def shard(self, shard_id: str) -> ParameterShard:
        """
        Return one shard object (for transports and tests).

        :param shard_id: a shard of the cluster.
        """
        self._require_shard(shard_id)
        return self._shards[shard_id]

    def assignment(self) -> dict[str, list[str]]:
        """
        Return the replica set of every partition, primary first.

        :returns: ``{partition key: [shard ids]}`` as the hash ring places them.
        """
        with self._lock:
            return {key: list(ids) for key, ids in self._assignment.items()}

    def stats(self) -> dict[str, Any]:
        """
        Return sizes and versions for monitoring.

        :returns: ``version``, ``partitions``, ``replicas``, ``commits``, ``delta_bytes``
            (float32 bytes of the deltas committed) and per shard (``shards``) ``alive``,
            ``partitions``, ``bytes``, ``min_version`` and ``max_version`` (``None`` for an
            empty shard).
        """
        with self._lock:
            shards = {}
            for shard_id in self.shard_ids:
                shard = self._shards[shard_id]
                versions = [shard.version_of(k) for k in shard.keys]
                shards[shard_id] = {
                    'alive': shard.alive,
                    'partitions': len(shard),
                    'bytes': shard.nbytes,
                    'min_version': min(versions) if versions else None,
                    'max_version': max(versions) if versions else None,
                }
            return {'version': self._version, 'partitions': len(self._layout),
                    'replicas': self.cfg.replicas, 'commits': self._commits,
                    'delta_bytes': self._delta_bytes, 'shards': shards}

    # ------------------------------------------------------------------ helpers
    def _require_shard(self, shard_id: str) -> None:
        if shard_id not in self._shards:
            raise KeyError(f'unknown shard {shard_id!r} (shards: {list(self.shard_ids)})')

    def _require_initialized(self) -> int:
        if self._version is None:
            raise ParameterServerError('the parameter server is not initialized; call '
                                       'initialize() with the initial tensors first')
        return self._version

    def _place(self) -> dict[str, list[str]]:
        return {p.key: self._ring.nodes_for(p.key, self.cfg.replicas) for p in self._layout}

    def _live(self, shard_ids: Iterable[str], exclude: str | None = None) -> list[str]:
        return [s for s in shard_ids
                if s != exclude and s in self._shards and self._shards[s].alive]

    def _require_live_replicas(self, action: str) -> None:
        lost = [key for key, ids in self._assignment.items() if not self._live(ids)]
        if lost:
            raise PartitionUnavailableError(
                f'cannot {action}: every replica of {len(lost)} partition(s) is down, e.g. '
                f'{lost[0]!r} on {self._assignment[lost[0]]}; recover one of those shards')

    def _copy_partition(self, partition: Partition, source: str, target: str) -> None:
        (values, version), = self._shards[source].read([partition.key]).values()
        self._shards[target].load(partition, values, version)

    # ------------------------------------------------------------------ data
    def initialize(self, tensors: Mapping[str, np.ndarray], version: int = 0) -> None:
        """
        Lay the tensors out over the shards (replacing any previous content).

        :param tensors: tensor name -> array (stored as float32).
        :param version: the version of these values; after the first initialization it must
            be greater than the current version (versions are monotonic).
        :raises VersionError: if ``version`` does not move forward.
        :raises PartitionUnavailableError: if every replica of some partition is down.
        """
        if int(version) != version or version < 0:
            raise ValueError(f'version must be an integer >= 0, got {version!r}')
        arrays = {name: _as_float32(value, name) for name, value in tensors.items()}
        if not arrays:
            raise ValueError('initialize() needs at least one tensor')
        with self._lock:
            if self._version is not None and version <= self._version:
                raise VersionError(f'cannot re-initialize at version {version}: the server '
                                   f'is already at version {self._version}')
            layout = partition_layout({n: a.shape for n, a in arrays.items()},
                                      self.cfg.chunk_size)
            assignment = {p.key: self._ring.nodes_for(p.key, self.cfg.replicas)
                          for p in layout}
            lost = [key for key, ids in assignment.items() if not self._live(ids)]
            if lost:
                raise PartitionUnavailableError(
                    f'cannot initialize: every replica of {lost[0]!r} ({assignment[lost[0]]}) '
                    f'is down')
            for shard in self._shards.values():
                shard.clear()
            for part in layout:
                values = arrays[part.tensor].reshape(-1)[part.start:part.stop]
                for shard_id in self._live(assignment[part.key]):
                    self._shards[shard_id].load(part, values, int(version))
            self._layout = layout
            self._shapes = {name: tuple(a.shape) for name, a in arrays.items()}
            self._assignment = assignment
            self._version = int(version)

    def commit(self, deltas: Mapping[str, np.ndarray], base_version: int) -> int:
        """
        Apply a whole-model change to every live replica and bump the version by one.

        Everything is checked before anything changes, and readers are held off until every
        partition is applied, so a read returns either the old or the new model, never a mix.
        Tensors missing from ``deltas`` are unchanged (their partitions advance in version).

        :param deltas: tensor name -> change (same shape, or same number of floats).
        :param base_version: the version the deltas were computed against; must be the
            current version (the learner is the single writer; stale bases are rejected,
            not rebased).
        :returns: the new version.
        :raises StaleCommitError: if ``base_version`` is not the current version.
        :raises PartitionUnavailableError: if every replica of some partition is down.
        """
        with self._lock:
            current = self._require_initialized()
            if base_version != current:
                raise StaleCommitError(
                    f'commit computed against version {base_version} but the server is at '
                    f'version {current}; the learner is the single writer: read the server, '
                    'acknowledge what it holds and commit the remaining change')
            flat: dict[str, np.ndarray] = {}
            for name, delta in deltas.items():
                if name not in self._shapes:
                    raise KeyError(f'commit names unknown tensor {name!r} (known: '
                                   f'{sorted(self._shapes)})')
                array = _as_float32(delta, name).reshape(-1)
                size = int(np.prod(self._shapes[name], dtype=np.int64))
                if array.size != size:
                    raise ValueError(f'delta of {name!r} has {array.size} floats, the tensor '
                                     f'{self._shapes[name]} has {size}')
                if not np.all(np.isfinite(array)):
                    raise ValueError(f'delta of {name!r} is not finite; commit refused')
                flat[name] = array
            self._require_live_replicas('commit')
            new = current + 1
            for part in self._layout:
                delta = flat.get(part.tensor)
                chunk = None if delta is None else delta[part.start:part.stop]
                for shard_id in self._live(self._assignment[part.key]):
                    self._shards[shard_id].apply(part.key, chunk, new)
            self._version = new
            self._commits += 1
            self._delta_bytes += sum(a.nbytes for a in flat.values())
            return new

    def read(self, names: Iterable[str] | None = None) -> tuple[int, dict[str, np.ndarray]]:
        """
        Assemble full tensors, each partition from its first live replica (failover).

        :param names: tensors to read (an actor needs only the policy); all when ``None``.
        :returns: ``(version, {name: float32 array})``; the arrays are fresh copies.
        :raises PartitionUnavailableError: if every replica of a needed partition is down.
        """
        with self._lock:
            version = self._require_initialized()
            wanted = dict.fromkeys(self._shapes if names is None else names)
            for name in wanted:
                if name not in self._shapes:
                    raise KeyError(f'unknown tensor {name!r} (known: {sorted(self._shapes)})')
            # One request per shard, as a transport would batch it.
            plan: dict[str, list[Partition]] = {}
            for part in self._layout:
                if part.tensor not in wanted:
                    continue
                live = self._live(self._assignment[part.key])
                if not live:
                    raise PartitionUnavailableError(
                        f'cannot read partition {part.key!r}: every replica '
                        f'({self._assignment[part.key]}) is down')
                plan.setdefault(live[0], []).append(part)
            flat = {name: np.empty(int(np.prod(self._shapes[name], dtype=np.int64)),
                                   dtype=np.float32) for name in wanted}
            for shard_id, parts in plan.items():
                answer = self._shards[shard_id].read([p.key for p in parts])
                for part in parts:
                    values, part_version = answer[part.key]
                    if part_version != version:
                        raise ParameterServerError(
                            f'shard {shard_id!r} holds partition {part.key!r} at version '
                            f'{part_version}, the server is at {version}')
                    flat[part.tensor][part.start:part.stop] = values
            return version, {name: flat[name].reshape(self._shapes[name]) for name in wanted}

    # ------------------------------------------------------------------ failures
    def fail_shard(self, shard_id: str) -> None:
        """
        Mark a shard as crashed: reads fail over to replicas, commits skip it.

        :param shard_id: a shard of the cluster.
        """
        with self._lock:
            self._require_shard(shard_id)
            self._shards[shard_id].alive = False

    def recover_shard(self, shard_id: str) -> int:
        """
        Bring a crashed shard back and re-sync its partitions from live replicas.

        Each partition assigned to it is copied from the first live replica; one that no live
        peer holds keeps the shard's own copy, which is then current (commits need a live
        replica of every partition). Partitions no longer assigned to it are dropped.

        :param shard_id: a shard of the cluster.
        :returns: the number of partitions copied from a peer.
        :raises PartitionUnavailableError: if a partition has neither a live peer nor a
            current copy on the shard (the shard then stays down).
        """
        with self._lock:
            self._require_shard(shard_id)
            shard = self._shards[shard_id]
            if shard.alive:
                return 0
            mine = [p for p in self._layout if shard_id in self._assignment[p.key]]
            for part in mine:
                current = part.key in shard and shard.version_of(part.key) == self._version
                if not current and not self._live(self._assignment[part.key], shard_id):
                    raise PartitionUnavailableError(
                        f'cannot recover {shard_id!r}: partition {part.key!r} has no live '
                        'replica to copy from and the shard copy is out of date')
            shard.alive = True
            assigned = {p.key for p in mine}
            for key in shard.keys:
                if key not in assigned:
                    shard.drop(key)
            copied = 0
            for part in mine:
                peers = self._live(self._assignment[part.key], shard_id)
                if peers:
                    self._copy_partition(part, peers[0], shard_id)
                    copied += 1
            return copied

    # ------------------------------------------------------------------ membership
    def _rebalance(self, new_assignment: dict[str, list[str]],
                   leaving: str | None = None) -> Rebalance:
        """Copy and drop replicas so the shards match ``new_assignment``; count the moves."""
        parts = {p.key: p for p in self._layout}
        plan = []
        for key, new_ids in new_assignment.items():
            old_ids = self._assignment[key]
            if old_ids == new_ids:
                continue
            # The leaving shard may hand its copy over while it is still alive.
            sources = self._live(old_ids)
            targets = [s for s in new_ids if s not in old_ids]
            if targets and not sources:
                raise PartitionUnavailableError(
                    f'cannot rebalance: every replica of {key!r} ({old_ids}) is down')
            # Never lose the last current copy: some live member of the new set must hold
            # the partition afterwards (a live newcomer gets a copy, a live stayer has one).
            if not any(s != leaving and self._shards[s].alive for s in new_ids):
                raise PartitionUnavailableError(
                    f'cannot rebalance: partition {key!r} would have no live replica on '
                    f'{new_ids}; recover one of them first')
            plan.append((parts[key], sources, targets,
                         [s for s in old_ids if s not in new_ids]))
        copied = dropped = 0
        for part, sources, targets, gone in plan:
            for target in targets:
                # A dead target re-syncs when it recovers.
                if self._shards[target].alive:
                    self._copy_partition(part, sources[0], target)
                    copied += 1
            for shard_id in gone:
                if shard_id != leaving and self._shards[shard_id].alive:
                    self._shards[shard_id].drop(part.key)
                    dropped += 1
        self._assignment = new_assignment
        return Rebalance(moved=len(plan), copied=copied, dropped=dropped)

    def add_shard(self, shard_id: str) -> Rebalance:
        """
        Add a shard and move to it the partitions whose replica set now includes it.

        :param shard_id: a new shard id.
        :returns: the partitions moved and the replicas copied and dropped.
        """
        with self._lock:
            if shard_id in self._shards:
                raise ValueError(f'shard {shard_id!r} already exists')
            self._ring.add_node(shard_id)
            self._shards[shard_id] = ParameterShard(shard_id)
            if self._version is None:
                return Rebalance(0, 0, 0)
            try:
                return self._rebalance(self._place())
            except PartitionUnavailableError:
                self._ring.remove_node(shard_id)
                del self._shards[shard_id]
                raise

    def remove_shard(self, shard_id: str) -> Rebalance:
        """
        Remove a shard after handing its partitions to the shards the ring now names.

        :param shard_id: a shard of the cluster (not the last one).
        :returns: the partitions moved and the replicas copied and dropped.
        """
        with self._lock:
            self._require_shard(shard_id)
            if len(self._shards) == 1:
                raise ValueError(f'cannot remove {shard_id!r}: it is the last shard')
            self._ring.remove_node(shard_id)
            if self._version is None:
                del self._shards[shard_id]
                return Rebalance(0, 0, 0)
            try:
                report = self._rebalance(self._place(), leaving=shard_id)
            except PartitionUnavailableError:
                self._ring.add_node(shard_id)
                raise
            del self._shards[shard_id]
            return report


# ====================================================================== learner side
class CommitAccumulator:
    """
    Learner side of the delayed update: the parameter change to commit every few steps.

    The accumulator keeps a *reference*, its copy of what the server holds. Every
    ``commit_every`` calls of :meth:`step` it returns ``delta = current - reference`` (float32)
    and advances the reference by exactly the float32 operation the server performs,
    ``reference += delta``. The reference therefore stays bit-identical to the server's
    state, and whatever float32 rounding keeps ``reference + delta`` from equalling
    ``current`` (a weight crossing zero, say) is not lost: it is part of the next delta.
    So the server never drifts from the learner by more than the rounding of the last
    commit, and one more :meth:`flush` after the last step usually makes it exact.

    :meth:`acknowledge` is the error-feedback hook: it sets the reference to what the server
    actually holds. The int8 codec layer calls it with the server's reconstruction after a
    lossy commit (so the quantization error is sent again in the next delta), and the learner
    calls it with a fresh :meth:`ParameterServer.read` after a failed or rejected commit (so
    the lost change is sent again).

    :param commit_every: optimizer steps per commit (1 commits every step).
    :param reference_tensors: what the server holds now (typically what it was initialized
        with); copied as float32.
    """

    def __init__(self, commit_every: int, reference_tensors: Mapping[str, np.ndarray]):
        if int(commit_every) != commit_every or commit_every < 1:
            raise ValueError(f'commit_every must be an integer >= 1, got {commit_every!r}')
        self.commit_every = int(commit_every)
        self._reference: dict[str, np.ndarray] = {}
        self.acknowledge(reference_tensors)
        self._last: dict[str, np.ndarray] | None = None
        self._pending_steps = 0
        #: Optimizer steps seen.
        self.steps = 0
        #: Deltas handed out.
        self.commits = 0
        #: Float32 bytes of the deltas handed out.
        self.bytes_committed = 0

    @property
    def reference(self) -> dict[str, np.ndarray]:
        """Return a copy of what the accumulator believes the server holds."""
        return {name: value.copy() for name, value in self._reference.items()}

    @property
    def pending_steps(self) -> int:
        """Return the steps since the last commit."""
        return self._pending_steps

    def _current(self, tensors: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if set(tensors) != set(self._reference):
            raise KeyError(f'tensors {sorted(tensors)} do not match the reference '
                           f'{sorted(self._reference)}')
        out = {}
        for name, value in tensors.items():
            array = np.array(_to_numpy(value), dtype=np.float32)  # a copy: no aliasing
            if array.shape != self._reference[name].shape:
                raise ValueError(f'tensor {name!r} has shape {array.shape}, the reference '
                                 f'{self._reference[name].shape}')
            out[name] = array
        return out

    def _delta(self, current: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        delta = {}
        for name, value in current.items():
            # asarray: a 0-d tensor (log_alpha) must stay an array, not a numpy scalar.
            change = np.asarray(value - self._reference[name], dtype=np.float32)
            self._reference[name] += change
            delta[name] = change
        self._pending_steps = 0
        self.commits += 1
        self.bytes_committed += sum(d.nbytes for d in delta.values())
        return delta

    def step(self, current_tensors: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """
        Record one optimizer step; every ``commit_every``-th call return the change to commit.

        :param current_tensors: the learner's parameters after the step (numpy arrays or CPU
            torch tensors); not modified.
        :returns: ``{name: float32 delta}`` on a commit step, else ``None``.
        """
        current = self._current(current_tensors)
        self._last = current
        self.steps += 1
        self._pending_steps += 1
        if self._pending_steps < self.commit_every:
            return None
        return self._delta(current)

    def flush(self, current_tensors: Mapping[str, Any] | None = None
              ) -> dict[str, np.ndarray] | None:
        """
        Commit now, whatever the step count (at shutdown, before a checkpoint or an export).

        :param current_tensors: the learner's parameters; those of the last :meth:`step` when
            ``None``.
        :returns: the change to commit, or ``None`` when the reference already equals the
            parameters bit for bit (nothing to send).
        """
        if current_tensors is not None:
            self._last = self._current(current_tensors)
        if self._last is None:
            return None
        if all(np.array_equal(self._last[n], self._reference[n]) for n in self._reference):
            self._pending_steps = 0
            return None
        return self._delta(self._last)

    def acknowledge(self, committed_state: Mapping[str, Any]) -> None:
        """
        Set the reference to what the server actually holds (the error-feedback hook).

        :param committed_state: the server's values of every tensor, e.g. its reconstruction
            after a lossy-coded commit or a fresh read after a failed commit.
        """
        state = {name: _as_float32(_to_numpy(value), name).copy()
                 for name, value in committed_state.items()}
        if self._reference and set(state) != set(self._reference):
            raise KeyError(f'acknowledged tensors {sorted(state)} do not match '
                           f'{sorted(self._reference)}')
        if not state:
            raise ValueError('the reference needs at least one tensor')
        self._reference = state


def _to_numpy(value: Any) -> Any:
    """Return a numpy view of a CPU torch tensor (duck-typed: no torch import), or the value."""
    detach = getattr(value, 'detach', None)
    if detach is not None:
        return detach().cpu().numpy()
    return value
