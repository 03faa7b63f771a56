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

"""The ``main`` skeleton every node shares: init, spin, a clean shutdown on Humble and Jazzy."""

from __future__ import annotations

import signal
import sys
from typing import Any, Callable

from async_rl_ros.core.config import ConfigError
from async_rl_ros.core.errors import describe_missing
from async_rl_ros.core.learning.resume import CheckpointError
from async_rl_ros.core.learning.run_folder import RunFolderError
import rclpy
from rclpy.executors import ExternalShutdownException

__all__ = ['run_node', 'LoggingAdapter', 'TopicBoard', 'apply_env_config', 'log_late']


class LoggingAdapter:
    """A node's logger with the ``logging`` call style (``%`` arguments) of the core."""

    def __init__(self, logger: Any):
        self._logger = logger

    def warning(self, msg: str, *args: Any) -> None:
        """Log a warning."""
        self._logger.warning(msg % args)

    def error(self, msg: str, *args: Any) -> None:
        """Log an error."""
        self._logger.error(msg % args)

    def critical(self, msg: str, *args: Any) -> None:
        """Log a fatal condition."""
        self._logger.fatal(msg % args)


class TopicBoard:
    """A publisher as a weights board: what goes out on the topic is the newest of its kind."""

    def __init__(self, publisher: Any):
        self.publisher = publisher

    def publish(self, msg: Any, version: int) -> None:
        """Publish ``msg`` (``version`` travels in the message)."""
        self.publisher.publish(msg)


def apply_env_config(logger: Any, env: Any, section: Any, keys: tuple[str, ...]) -> None:
    """
    Apply an accepted ``env_worker`` parameter change to a running env; log what applies when.

    :param logger: the node's logger.
    :param env: the env (``None`` before *configure*, which then builds it from ``section``).
    :param section: the changed section.
    :param keys: the keys that changed.
    """
    apply = getattr(getattr(env, 'unwrapped', env), 'apply_config', None)
    if apply is not None:
        logger.info(f'{", ".join(keys)}: {apply(section)}')
    elif env is not None:
        logger.info(f'{", ".join(keys)}: this task\'s environment takes no change while it '
                    'runs; in force once the node is configured again')


def log_late(node: Any, message: str, level: str = 'info') -> None:
    """
    Log ``message`` on the node's logger, or on stderr once its ROS context is shut down.

    What a node writes while it shuts down (its final save after Ctrl-C) would otherwise reach
    the console with an rcl complaint that ``/rosout`` is gone.

    :param level: ``'info'`` or ``'error'``.
    """
    if node.context.ok():
        getattr(node.get_logger(), level)(message)
    else:
        print(f'[{level.upper()}] [{node.get_name()}]: {message}', file=sys.stderr, flush=True)


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
    except CheckpointError as exc:  # resume=true with no usable or a foreign checkpoint
        print(f'checkpoint error: {exc}', file=sys.stderr)
        status = 2
    except RunFolderError as exc:  # nothing to resume, or another learner holds the run
        print(f'run folder: {exc}', file=sys.stderr)
        status = 2
    except ModuleNotFoundError as exc:  # a package imported when the node starts
        missing = describe_missing(exc)
        if missing is None:
            raise
        print(missing, file=sys.stderr)
        status = 2
    except Exception:  # noqa: B902 -- rclpy raises RCLError when Ctrl-C shuts the context
        if rclpy.ok():  # down while the executor builds its wait set: that is a normal stop
            raise
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
