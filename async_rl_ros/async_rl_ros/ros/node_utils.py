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

"""Shared pieces of the nodes: the ``main`` skeleton, building and stopping the arm."""

from __future__ import annotations

import signal
import sys
from typing import Any, Callable

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig
import rclpy
from rclpy.executors import ExternalShutdownException

__all__ = ['run_node', 'build_env', 'backend_call']


def build_env(cfg: EnvWorkerConfig, gate: Any = None) -> Any:
    """
    Build (connect) the reach environment of ``cfg.backend``; a real arm gets ``gate``.

    :param cfg: the ``env_worker`` section.
    :param gate: :class:`~async_rl_ros.envs.rtde_supervisor.PolicyGate` the node feeds
        (backend ``ur5``; ``None`` lets every command through, e.g. a fixed policy).
    """
    from async_rl_ros.envs.reach_env import make_reach_env, UR5ReachEnv
    if cfg.backend == 'ur5':
        from async_rl_ros.envs.ur5_rtde import UR5RTDE
        return UR5ReachEnv(cfg, backend=UR5RTDE(cfg, gate=gate))
    return make_reach_env(cfg)


def backend_call(env: Any, name: str) -> None:
    """Call the arm backend's ``name`` (``stop``, ``interrupt``, ``resume``) if it has one."""
    backend = getattr(getattr(env, 'unwrapped', env), 'backend', None)
    method = getattr(backend, name, None)
    if callable(method):
        method()


def run_node(factory: Callable[[], object], args: list[str] | None = None) -> int:
    """
    Initialize rclpy, spin the node ``factory`` builds, shut down cleanly on Humble and Jazzy.

    A :class:`ConfigError` while building the node (invalid parameters) is reported in one
    line, without a traceback, and the process exits with status 2. Once the node stops,
    further SIGINTs are ignored until the clean-up is done (``ros2 launch`` ends a process
    that hangs there with SIGTERM, then SIGKILL).

    :param factory: builds the node (after ``rclpy.init``).
    :param args: command-line arguments for ``rclpy.init``.
    :returns: the exit status.
    """
    rclpy.init(args=args)
    node = None
    status = 0
    try:
        node = factory()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except ConfigError as exc:
        print(f'invalid configuration: {exc}', file=sys.stderr)
        status = 2
    finally:
        # Ctrl-C in a terminal reaches every node twice (from the terminal and from ros2
        # launch): once stopping, finish the clean-up (checkpoint, arm stop) undisturbed.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if node is not None:
            close = getattr(node, 'close', None)
            if close is not None:
                close()
            node.destroy_node()
        rclpy.try_shutdown()
    return status
