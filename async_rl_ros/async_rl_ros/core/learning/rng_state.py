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
Random states in checkpoints: capture them all, restore them all or none.

:func:`capture_rng_state` takes the global states of python ``random``, numpy and torch (and
CUDA) plus named generators; :func:`restore_rng_state` first tries every saved state on a
scratch generator of the same kind and only then sets the real ones, so a saved state that
does not fit (a checkpoint of another version, or a crafted one) raises one ``ValueError``
naming the part and leaves every generator as it was, instead of an ``OverflowError`` from
deep inside ``random.setstate`` after half of them were already changed.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Mapping

import numpy as np
import torch

__all__ = ['capture_rng_state', 'restore_rng_state']


def capture_rng_state(generators: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """
    Capture the global random states of python, numpy and torch (and CUDA, when available).

    :param generators: extra named ``numpy.random.Generator`` or ``torch.Generator`` objects
        (e.g. the replay buffer's sampler).
    :returns: a dict for the checkpoint; give it to :func:`restore_rng_state`.
    """
    state: dict[str, Any] = {
        'python': random.getstate(),
        'numpy': np.random.get_state(),
        'torch': torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state['cuda'] = torch.cuda.get_rng_state_all()
    if generators:
        extra = {}
        for name, gen in generators.items():
            if isinstance(gen, torch.Generator):
                extra[name] = gen.get_state()
            else:
                extra[name] = gen.bit_generator.state
        state['generators'] = extra
    return state


def _python_state(saved: Any) -> tuple:
    version, internal, gauss = saved
    return (version, tuple(internal), gauss)


def _cuda_states(saved: Any) -> list[torch.Tensor]:
    states = [torch.as_tensor(s).cpu() for s in list(saved)[:torch.cuda.device_count()]]
    for device, cuda_state in enumerate(states):
        expected = torch.cuda.get_rng_state(device)
        if cuda_state.dtype != torch.uint8 or cuda_state.shape != expected.shape:
            raise ValueError(f'CUDA state {device} is a {cuda_state.dtype} tensor of shape '
                             f'{tuple(cuda_state.shape)}')
    return states


def restore_rng_state(state: Mapping[str, Any],
                      generators: Mapping[str, Any] | None = None) -> None:
    """
    Restore random states captured by :func:`capture_rng_state`: all of them or none.

    :param state: the captured dict (possibly loaded from a checkpoint).
    :param generators: the same named generators that were captured; each gets its state back.
    :raises KeyError: a generator of ``generators`` has no saved state (nothing was changed).
    :raises ValueError: a saved state is missing or does not fit (nothing was changed).
    """
    saved = state.get('generators', {}) if isinstance(state, Mapping) else {}
    for name in generators or {}:
        if name not in saved:
            raise KeyError(f'no saved random state for generator {name!r}')
    apply: list[Callable[[], None]] = []

    def check(part: str, build: Callable[[], Any], trial: Callable[[Any], None],
              real: Callable[[Any], None]) -> None:
        """Convert and try the saved ``part`` on a scratch generator; queue the real one."""
        try:
            value = build()
            trial(value)
        except Exception as exc:  # noqa: B902 -- any bad value: one message, nothing changed
            raise ValueError(f'the saved random state {part!r} cannot be restored '
                             f'({type(exc).__name__}: {exc})'[:300]) from None
        apply.append(lambda: real(value))

    if not isinstance(state, Mapping):
        raise ValueError(f'the saved random states are a {type(state).__name__}, not a dict')
    check('python', lambda: _python_state(state['python']), random.Random().setstate,
          random.setstate)
    check('numpy', lambda: state['numpy'], np.random.RandomState().set_state,
          np.random.set_state)
    check('torch', lambda: torch.as_tensor(state['torch'], dtype=torch.uint8).cpu(),
          torch.Generator().set_state, torch.set_rng_state)
    if 'cuda' in state and torch.cuda.is_available():
        def set_cuda(states: list[torch.Tensor]) -> None:
            for device, cuda_state in enumerate(states):
                torch.cuda.set_rng_state(cuda_state, device)
        check('cuda', lambda: _cuda_states(state['cuda']), lambda _: None, set_cuda)
    for name, gen in (generators or {}).items():
        if isinstance(gen, torch.Generator):
            check(name, lambda: torch.as_tensor(saved[name]).cpu(),
                  torch.Generator(device=gen.device).set_state, gen.set_state)
        else:
            def set_bits(value: Any, gen: Any = gen) -> None:
                gen.bit_generator.state = value

            def try_bits(value: Any, kind: type = type(gen.bit_generator)) -> None:
                kind().state = value
            check(name, lambda: saved[name], try_bits, set_bits)
    for step in apply:
        step()
