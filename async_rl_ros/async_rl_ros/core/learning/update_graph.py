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
A learner update replayed as one CUDA graph (``sac.cuda_graph``).

A SAC update of small networks is hundreds of short kernels; launched one by one from Python,
the GPU waits on the host between them (an H200 ran the eager update of the shipped networks at
121 updates/s, slower than two CPU cores). :class:`UpdateGraphs` records the whole update once
per *key* (batch size, whether the actor steps, whether the regularization term is on) with
``torch.cuda.graph`` and replays it: the inputs are copied into static buffers, the graph
launches every kernel at once, and its outputs (the metrics vector, ``|TD|``) are read after.
The technique is NVIDIA's and PyTorch's whole-network capture ("CUDA Graphs", PyTorch CUDA
semantics notes); the optimizers are fused Adam with ``capturable=True``.

What a replay cannot see is guarded here, at the root, rather than by every caller:

* **Replaced tensors.** A graph reads and writes fixed addresses. A checkpoint load, the
  doctor's restore of a good state (``Optimizer.load_state_dict`` makes new moment tensors) or
  a new reference policy can swap a tensor for another. Before each replay the addresses of
  every state tensor and the host-side settings the graph baked in (learning rates, the
  config) are compared with those at capture; any change drops the graphs, which are captured
  again.
* **Warm-up.** Libraries initialize lazily on first use; the first ``warmup`` updates of a key
  run eagerly on the capture stream (real updates, not thrown away), then it is captured.
* **Non-finite steps.** The graph copies the state into a backup at its start and reports
  whether every loss and gradient norm was finite; on a non-finite update the caller restores
  the backup and the random generator (:meth:`UpdateGraphs.restore`) and redoes the update
  eagerly with the Python guard, so the outcome is exactly the eager one.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Hashable, Sequence

import torch

__all__ = ['UpdateGraphs']

#: ``body(*static_inputs) -> (outputs, meta)``: the update on the static inputs, its output
#: tensors and whatever host-side description of them the caller wants back with each replay.
Body = Callable[..., tuple[Sequence[torch.Tensor], Any]]
#: ``record(fn) -> replay``: runs nothing yet, returns what runs ``fn``'s recorded work again.
Recorder = Callable[[Callable[[], None]], Callable[[], None]]


def replay_in_python(fn: Callable[[], None]) -> Callable[[], None]:
    """
    Record nothing: each replay calls ``fn`` again (a stand-in for a CUDA graph).

    It lets a CPU test run every rule of :class:`UpdateGraphs` (keys, warm-up, re-capture,
    backup and undo); what only a device shows, the capture itself, is tested on CUDA.
    """
    return fn


@dataclasses.dataclass
class _Entry:
    """One key's graph, its static buffers and how many eager warm-up updates it has had."""

    warm: int = 0
    replay: Callable[[], None] | None = None
    inputs: list[torch.Tensor] = dataclasses.field(default_factory=list)
    outputs: Sequence[torch.Tensor] = ()
    meta: Any = None
    backup: list[torch.Tensor] = dataclasses.field(default_factory=list)


class UpdateGraphs:
    """
    Capture and replay an update function per key, on one device.

    :param device: the device of the state and the inputs (CUDA, unless ``recorder`` is
        given).
    :param state: returns every tensor the update reads or changes between calls (parameters,
        targets, optimizer moments and steps); a replaced one forces a new capture, and the
        graph backs them all up at its start.
    :param settings: returns the host-side values the update bakes in (learning rates ...);
        compared by equality before each replay.
    :param warmup: eager updates per key before it is captured.
    :param keep: graphs kept at most (least recently used dropped first): the batch sizer
        grows the batch in steps, so old sizes rarely come back.
    :param recorder: how an update is recorded; ``None``: a CUDA graph (CUDA devices only).
    """

    def __init__(self, device: torch.device, state: Callable[[], list[torch.Tensor]],
                 settings: Callable[[], tuple[Any, ...]], warmup: int = 2, keep: int = 4,
                 recorder: Recorder | None = None):
        if recorder is None and device.type != 'cuda':
            raise ValueError(f'CUDA graphs need a CUDA device, got {device}')
        self.device = device
        self._state = state
        self._settings = settings
        self.warmup = int(warmup)
        self.keep = int(keep)
        self._stream = torch.cuda.Stream(device) if device.type == 'cuda' else None
        self._record = recorder if recorder is not None else self._cuda_graph
        self._entries: collections.OrderedDict[Hashable, _Entry] = collections.OrderedDict()
        self._fingerprint: tuple[Any, ...] | None = None
        self._last: _Entry | None = None
        self._rng = torch.empty(0, dtype=torch.uint8)
        #: Graphs captured so far (a test and the bench read it).
        self.captures = 0

    def _fingerprint_now(self) -> tuple[Any, ...]:
        """Return where every state tensor lives and the baked-in settings, as of now."""
        return tuple(t.data_ptr() for t in self._state()), self._settings()

    def _check_fingerprint(self) -> None:
        """Drop every graph when a state tensor moved or a baked-in setting changed."""
        fingerprint = self._fingerprint_now()
        if fingerprint != self._fingerprint:
            self._entries.clear()
            self._last = None
            self._fingerprint = fingerprint

    def run(self, key: Hashable, inputs: Sequence[torch.Tensor], body: Body,
            eager: Callable[[], Any]) -> tuple[bool, Any]:
        """
        Run one update: replay the key's graph, or warm it up eagerly, or capture it first.

        :param key: what selects the graph; the inputs of a key always have the same shapes.
        :param inputs: this update's input tensors (copied into the graph's static buffers).
        :param body: the update written on its inputs (captured once per key).
        :param eager: the same update run eagerly (a warm-up), returning the caller's result.
        :returns: ``(True, (outputs, meta))`` after a replay (the outputs are the graph's own
            buffers: read or clone them before the next call), ``(False, eager())`` after a
            warm-up.
        """
        self._check_fingerprint()
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
            while len(self._entries) > self.keep:
                self._entries.popitem(last=False)
        self._entries.move_to_end(key)
        if entry.replay is None and entry.warm < self.warmup:
            entry.warm += 1
            if self._stream is None:
                result = eager()
            else:
                self._stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self._stream):
                    result = eager()
                torch.cuda.current_stream(self.device).wait_stream(self._stream)
            # An eager step can create tensors (the first optimizer step creates the moments).
            self._fingerprint = self._fingerprint_now()
            return False, result
        if entry.replay is None:
            self._capture(entry, inputs, body)
        for static, value in zip(entry.inputs, inputs):
            static.copy_(value, non_blocking=True)
        self._rng = self._get_rng()
        entry.replay()
        self._last = entry
        return True, (entry.outputs, entry.meta)

    def _capture(self, entry: _Entry, inputs: Sequence[torch.Tensor], body: Body) -> None:
        state = [tensor.detach() for tensor in self._state()]
        entry.inputs = [value.detach().clone() for value in inputs]
        entry.backup = [tensor.clone() for tensor in state]

        def update() -> None:
            with torch.no_grad():
                torch._foreach_copy_(entry.backup, state)
            entry.outputs, entry.meta = body(*entry.inputs)

        entry.replay = self._record(update)
        self.captures += 1

    def _cuda_graph(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Record ``fn`` as a CUDA graph on the capture stream; return its replay."""
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's CUDA call (a weight copy) does not break the capture.
        with torch.cuda.graph(graph, stream=self._stream, capture_error_mode='thread_local'):
            fn()
        return graph.replay

    def restore(self) -> None:
        """Undo the last replay: its state backup and the random numbers it drew."""
        if self._last is None:
            raise RuntimeError('UpdateGraphs.restore() without a replay to undo')
        with torch.no_grad():
            torch._foreach_copy_([t.detach() for t in self._state()], self._last.backup)
        if self.device.type == 'cuda':
            torch.cuda.set_rng_state(self._rng, self.device)
        else:
            torch.set_rng_state(self._rng)

    def _get_rng(self) -> torch.Tensor:
        if self.device.type == 'cuda':
            return torch.cuda.get_rng_state(self.device)
        return torch.get_rng_state()
