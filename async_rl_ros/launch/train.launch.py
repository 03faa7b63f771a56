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
Train with ROS 2: env workers, the learner and the parameter-server shards (and rqt).

    ros2 launch async_rl_ros train.launch.py num_workers:=2
    ros2 launch async_rl_ros train.launch.py task:=gym:PandaPush-v3 num_workers:=2
    ros2 launch async_rl_ros train.launch.py robot:=ur5 robot_ip:=<ip> num_sim_workers:=3

Several hosts (README.md, "Several hosts"): ``role:=learner`` on the learner host starts the
learner and the shards, ``role:=workers`` on each worker host its workers (with
``first_worker_id`` so that ids do not collide); the default ``role:=all`` starts everything.

Every node gets its section of ``config`` (the ``ros__parameters`` file the local runner
reads too), checked here and laid over the task's own defaults (push: wider networks), plus
the ``ros_transport`` section under ``transport.``. Workers run in their own
namespaces (``/worker_<i>``) and are respawned when they die; the launch file brings each
lifecycle worker to *active* through its ``change_state`` service (configure, then activate)
whenever its process starts, so again after every respawn. With ``robot:=ur5`` the real arm
is worker 0 (``first_worker_id``) and no worker starts unless ``async-rl-preflight`` passes
(or ``skip_preflight:=true``). With ``rqt:=true`` rqt opens ``config/async_rl.perspective``
once every topic its plots read exists (rqt_plot drops a topic it cannot find at start).
With ``security:=true`` every node runs in its SROS2 enclave of ``keystore`` (made by
tools/sros2_keystore.sh; docs/ros.md, "Security"), and so does this process's own node, which
drives the workers' lifecycle.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import pathlib
import time

from async_rl_ros.core.config import (ConfigError, EnvWorkerConfig, LEARNER_ENV_SECTIONS,
                                      LearnerConfig, load_node_config, RosTransportConfig)
from async_rl_ros.core.workers.machine import check_memory
from async_rl_ros.envs.factory import check_config, needs_object_pose
from async_rl_ros.envs.tasks import task_defaults
from async_rl_ros.ros.bag_reader import usable_bag
import launch
from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, ExecuteProcess, LogInfo, OpaqueFunction,
                            RegisterEventHandler)
from launch.event_handlers import OnProcessExit, OnProcessStart
from launch.events import IncludeLaunchDescription as IncludeLaunchDescriptionEvent
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode, Node
from launch_ros.ros_adapters import get_ros_adapter, get_ros_node
from launch_ros.substitutions import ExecutableInPackage, FindPackageShare
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState as ChangeStateSrv, GetState

PACKAGE = 'async_rl_ros'
RESPAWN_DELAY_S = 2.0  # s before a dead worker or shard is started again
SERVICE_TIMEOUT_S = 5.0  # s a lifecycle service call waits for its answer before a retry
RQT_WAIT_S = 120.0  # s rqt waits at most for the topics its plots read
#: What each ``role`` starts: workers, learner (with the parameter-server shards).
ROLES = {'all': ('workers', 'learner'), 'learner': ('learner',), 'workers': ('workers',)}
#: SROS2 enclave of each executable (``security:=true``); this process's node is a monitor.
ENCLAVES = {'learner': '/async_rl_ros/learner', 'param_server': '/async_rl_ros/shard',
            'env_worker': '/async_rl_ros/worker', 'rqt_gui': '/async_rl_ros/monitor'}
LAUNCH_ENCLAVE = '/async_rl_ros/monitor'


def generate_launch_description() -> LaunchDescription:
    """Declare the arguments; the nodes are built once they are known."""
    share = FindPackageShare(PACKAGE)
    args = [
        DeclareLaunchArgument('role', default_value='all', choices=['all', 'learner', 'workers'],
                              description='What this host runs: all (one host), learner (the '
                              'learner and the parameter-server shards: the learner host) or '
                              'workers (the env workers only: a worker host).'),
        DeclareLaunchArgument('task', default_value='',
                              description='Task to learn (env_worker task.name): reach, push '
                              'or pick_and_place (with robot:=ur5: the gripper and a camera '
                              'publishing the cube pose on cell.pose_topic), gym:ID (a Gymnasium '
                              'goal-conditioned env, robot:=sim only) or a task '
                              'registered under the async_rl_ros.tasks entry point group '
                              '(empty: the config value, reach).'),
        DeclareLaunchArgument('first_worker_id', default_value='0',
                              description='Id (and namespace /worker_<id>) of the first worker '
                              'started here; worker hosts need ranges that do not overlap.'),
        DeclareLaunchArgument('robot', default_value='sim', choices=['sim', 'ur5'],
                              description='sim: simulated workers only; ur5: the physical UR5 '
                              'is worker 0, plus num_sim_workers simulated ones.'),
        DeclareLaunchArgument('num_workers', default_value='2',
                              description='Simulated env workers (robot:=sim).'),
        DeclareLaunchArgument('num_sim_workers', default_value='0',
                              description='Simulated workers next to the real arm '
                              '(robot:=ur5: a mixed fleet).'),
        DeclareLaunchArgument('robot_ip', default_value='192.168.1.102',
                              description='IP address of the UR controller (robot:=ur5).'),
        DeclareLaunchArgument('skip_preflight', default_value='false',
                              choices=['true', 'false'],
                              description='robot:=ur5: start without async-rl-preflight '
                              'passing first (not recommended).'),
        DeclareLaunchArgument('config',
                              default_value=PathJoinSubstitution([share, 'config',
                                                                  'train.yaml']),
                              description='ros__parameters file with the env_worker, learner '
                              'and ros_transport sections.'),
        DeclareLaunchArgument('device', default_value='auto',
                              choices=['auto', 'cpu', 'cuda'],
                              description='Device of the learner (auto: CUDA when present).'),
        DeclareLaunchArgument('num_param_shards', default_value='',
                              description='Parameter-server shard nodes (empty: the config '
                              'value ros_transport.parameter_server.num_shards).'),
        DeclareLaunchArgument('replicas', default_value='',
                              description='Shards holding each partition (empty: the config '
                              'value ros_transport.parameter_server.replicas).'),
        DeclareLaunchArgument('log_dir', default_value='',
                              description='TensorBoard logs, checkpoints and the exported '
                              'policy (empty: the config value learner.log_dir).'),
        DeclareLaunchArgument('rqt', default_value='false', choices=['true', 'false'],
                              description='Open rqt with the shipped perspective (plots and '
                              'the robot monitor).'),
        DeclareLaunchArgument('security', default_value='false', choices=['true', 'false'],
                              description='SROS2: run every node in its enclave of keystore '
                              '(authenticated, encrypted, access-controlled DDS; only the '
                              'shards may publish weights, only the workers transitions).'),
        DeclareLaunchArgument('keystore', default_value='~/.ros/async_rl_ros_keystore',
                              description='SROS2 keystore made by tools/sros2_keystore.sh '
                              '(security:=true).'),
        DeclareLaunchArgument('learner_stop_timeout', default_value='60',
                              description='Seconds the learner has after Ctrl-C to write its '
                              'final checkpoint, policy and summary before ros2 launch sends '
                              'SIGTERM (SIGKILL 5 s later); a Ctrl-C during the final '
                              'evaluation cuts it short. Raise it when checkpoints hold a '
                              'large replay buffer (learner.checkpoint.save_replay_buffer).'),
    ]
    return LaunchDescription(args + [OpaqueFunction(function=_launch_setup)])


def _stop_timeout(context) -> str:
    """Return ``learner_stop_timeout``, checked: seconds, > 0 and <= 3600."""
    text = _arg(context, 'learner_stop_timeout')
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0.0 < seconds <= 3600.0:
        raise ConfigError('learner_stop_timeout', text, 'seconds > 0 and <= 3600')
    return str(seconds)


def _arg(context, name: str) -> str:
    return LaunchConfiguration(name).perform(context)


def _count(context, name: str) -> int:
    text = _arg(context, name)
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(name, text, 'a whole number >= 0') from None
    if value < 0:
        raise ConfigError(name, text, 'a whole number >= 0')
    return value


def _security(context) -> dict:
    """
    Return the SROS2 options of each executable's nodes (none without ``security:=true``).

    A keystore without the enclaves of tools/sros2_keystore.sh stops the launch here. This
    process's own node (launch_ros makes it on first use: it brings the workers up) is made
    now, in ``LAUNCH_ENCLAVE``; the variables are set for that alone, not for the children.
    """
    if _arg(context, 'security') != 'true':
        return {}
    keystore = os.path.abspath(os.path.expanduser(_arg(context, 'keystore')))
    missing = sorted(e for e in {*ENCLAVES.values(), LAUNCH_ENCLAVE} if not os.path.isfile(
        os.path.join(keystore, 'enclaves', e.lstrip('/'), 'permissions.p7s')))
    if missing:
        raise ConfigError('keystore', keystore, f'an SROS2 keystore with {", ".join(missing)}: '
                          f'make it with tools/sros2_keystore.sh {keystore}')
    env = {'ROS_SECURITY_ENABLE': 'true', 'ROS_SECURITY_STRATEGY': 'Enforce',
           'ROS_SECURITY_KEYSTORE': keystore}
    if hasattr(context.locals, 'ros_adapter'):
        raise ConfigError('security', 'true', 'a launch whose ROS node is not started yet '
                          '(include train.launch.py before anything that uses ROS)')
    saved = dict(os.environ)
    os.environ.update(env, ROS_SECURITY_ENCLAVE_OVERRIDE=LAUNCH_ENCLAVE)
    try:
        get_ros_adapter(context)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {executable: {'ros_arguments': ['--enclave', enclave], 'additional_env': env}
            for executable, enclave in ENCLAVES.items()}


def _bring_up(context, node_name: str) -> None:
    """
    Drive a (re)started lifecycle node to active through its change_state service.

    Runs beside the launch loop. A request that gets no answer is sent again: after a
    respawn the graph can still list the dead process's service for a while, and a request
    sent before the new process is matched is lost. A refused transition is checked against
    the node's state, so an answer that was lost does not stop the bring-up.
    """
    node = get_ros_node(context)
    change = node.create_client(ChangeStateSrv, f'{node_name}/change_state')
    get_state = node.create_client(GetState, f'{node_name}/get_state')
    log = launch.logging.get_logger('async_rl_ros.bring_up')

    def call(client, request):
        if not client.wait_for_service(timeout_sec=1.0):
            return None
        future = client.call_async(request)
        deadline = time.monotonic() + SERVICE_TIMEOUT_S
        while not future.done() and time.monotonic() < deadline and not context.is_shutdown:
            time.sleep(0.05)
        if not future.done():
            future.cancel()
            return None
        return future.result()

    def work():
        steps = ((Transition.TRANSITION_CONFIGURE, State.PRIMARY_STATE_INACTIVE),
                 (Transition.TRANSITION_ACTIVATE, State.PRIMARY_STATE_ACTIVE))
        for transition, goal in steps:
            while not context.is_shutdown:
                answer = call(change, ChangeStateSrv.Request(
                    transition=Transition(id=transition)))
                if answer is not None and answer.success:
                    break
                state = call(get_state, GetState.Request())
                if state is None:
                    continue  # nobody answered yet: ask again
                if state.current_state.id in (goal, State.PRIMARY_STATE_ACTIVE):
                    break  # done, only the answer was lost
                if answer is not None:  # the node refused the transition
                    log.error(f'{node_name}: transition {transition} refused in state '
                              f'{state.current_state.label}; see the node log')
                    return
        if not context.is_shutdown:
            log.info(f'{node_name} is active')

    context.add_completion_future(context.asyncio_loop.run_in_executor(None, work))


def _plotted_topics(perspective: str) -> list[str]:
    """Return the field paths (``/topic/field``) every rqt_plot of a perspective file plots."""
    data = json.loads(pathlib.Path(perspective).read_text(encoding='utf-8'))
    plugins = data['groups']['pluginmanager']['groups']
    return [path for name, group in plugins.items() if name.startswith('plugin__rqt_plot__')
            for path in ast.literal_eval(group['groups']['plugin']['keys']['topics']['repr'])]


def _start_when_plotted(context, rqt: Node, plotted: list[str]) -> None:
    """
    Start rqt once every topic its plots read exists.

    rqt_plot restores a perspective's topics once, when rqt starts, and silently drops a
    topic that does not exist yet; the learner's metric topics exist from its start. After
    ``RQT_WAIT_S`` rqt starts anyway, and the log names the topics still missing.
    """
    node = get_ros_node(context)
    log = launch.logging.get_logger('async_rl_ros.rqt')

    def missing() -> list[str]:
        names = [name for name, _ in node.get_topic_names_and_types()]
        return [path for path in plotted
                if not any(path == name or path.startswith(name + '/') for name in names)]

    async def wait():
        deadline = time.monotonic() + RQT_WAIT_S
        while not context.is_shutdown and missing():
            if time.monotonic() > deadline:
                log.warning(f'starting rqt; still no topic for {", ".join(missing())}: '
                            'those curves stay empty until added by hand')
                break
            await asyncio.sleep(0.5)
        if not context.is_shutdown:
            await context.emit_event(IncludeLaunchDescriptionEvent(LaunchDescription([rqt])))

    context.add_completion_future(context.asyncio_loop.create_task(wait()))


def _lifecycle_worker(worker_id: int, params: dict, secure: dict) -> list:
    """Return a worker node and the handler that brings it (and every respawn) to active."""
    namespace = f'worker_{worker_id}'
    node = LifecycleNode(package=PACKAGE, executable='env_worker', name='env_worker',
                         namespace=namespace, parameters=[params],
                         respawn=True, respawn_delay=RESPAWN_DELAY_S, output='screen',
                         **secure.get('env_worker', {}))
    bring_up = RegisterEventHandler(OnProcessStart(target_action=node, on_start=[
        OpaqueFunction(function=_bring_up, args=[f'/{namespace}/env_worker'])]))
    return [bring_up, node]


def _launch_setup(context) -> list:
    config = _arg(context, 'config')
    robot = _arg(context, 'robot')
    # task:=NAME wins over the file's env_worker task.name; the task's own defaults go under
    # the file. Each node gets its section checked and whole (the file's /** included).
    task = _arg(context, 'task') or load_node_config(config, 'env_worker',
                                                     EnvWorkerConfig).task.name
    defaults = task_defaults(task)

    def load(node: str, cls, overrides: dict):
        return load_node_config(config, node, cls, overrides, defaults=defaults.get(node))

    ps_overrides = {}
    for arg, key in (('num_param_shards', 'parameter_server.num_shards'),
                     ('replicas', 'parameter_server.replicas')):
        if _arg(context, arg):
            ps_overrides[key] = _count(context, arg)
    # Fail here, with the key named, rather than in every node (and every respawn).
    transport = load('ros_transport', RosTransportConfig, ps_overrides)
    if transport.warm_start_bag:  # a recording the learner cannot use: nothing starts
        usable_bag(transport.warm_start_bag, 'ros_transport.warm_start_bag')
    learner_overrides = {'sac.device': _arg(context, 'device')}
    log_dir = _arg(context, 'log_dir')
    if log_dir:
        learner_overrides['log_dir'] = log_dir  # the learner makes the run's folder in it
    learner_cfg = load('learner', LearnerConfig, learner_overrides)
    task_override = {'task.name': task}

    transport_params = {'transport': transport.to_flat()}
    role = ROLES[_arg(context, 'role')]
    secure = _security(context)
    entities: list = []
    if 'workers' in role:
        counted = 'num_sim_workers' if robot == 'ur5' else 'num_workers'
        sims = _count(context, counted)
        arm = ['ur5'] if robot == 'ur5' else []
        fleet = arm + ['sim'] * sims
        if not fleet:
            raise ConfigError('num_workers', 0, 'at least one worker')
        with_learner = 1 + transport.parameter_server.num_shards if 'learner' in role else 0
        check_memory(sims, len(arm) + with_learner, counted, sims)
        first = _count(context, 'first_worker_id')
        for worker_id, backend in enumerate(fleet, start=first):
            overrides = {'backend': backend, **task_override}
            if backend == 'ur5':
                overrides['rtde.robot_ip'] = _arg(context, 'robot_ip')
            worker_cfg = load('env_worker', EnvWorkerConfig, overrides)
            check_config(worker_cfg)  # an unknown task, or one this arm cannot run, stops here
            params = dict(worker_cfg.to_flat(), **transport_params, worker_id=worker_id,
                          hidden_sizes=[int(h) for h in learner_cfg.sac.hidden_sizes])
            entities += _lifecycle_worker(worker_id, params, secure)
    if 'learner' in role:
        env_cfg = load('env_worker', EnvWorkerConfig, task_override)
        check_config(env_cfg)
        # the task (hindsight relabeling) and what the evaluator's arm shares with the workers
        shared = {k: v for k, v in env_cfg.to_flat().items()
                  if k.split('.', 1)[0] in LEARNER_ENV_SECTIONS}
        learner_params = dict(learner_cfg.to_flat(), **shared, **transport_params)
        # ros2 launch's default (SIGTERM 5 s after SIGINT, SIGKILL 5 s later) can kill the
        # learner while it saves: what it learned since the last checkpoint would be lost.
        entities.append(Node(package=PACKAGE, executable='learner', name='learner',
                             parameters=[learner_params], output='screen',
                             sigterm_timeout=_stop_timeout(context),
                             **secure.get('learner', {})))
        for shard_id in range(transport.parameter_server.num_shards):
            entities.append(Node(package=PACKAGE, executable='param_server',
                                 name=f'param_server_{shard_id}',
                                 parameters=[dict(transport_params, shard_id=shard_id)],
                                 respawn=True, respawn_delay=RESPAWN_DELAY_S, output='screen',
                                 **secure.get('param_server', {})))
    if _arg(context, 'rqt') == 'true':
        perspective = PathJoinSubstitution([FindPackageShare(PACKAGE), 'config',
                                            'async_rl.perspective']).perform(context)
        # rqt_robot_monitor reads /diagnostics_agg: show the nodes' /diagnostics directly.
        rqt = Node(package='rqt_gui', executable='rqt_gui', name='rqt',
                   arguments=['--perspective-file', perspective],
                   remappings=[('/diagnostics_agg', '/diagnostics')],
                   **secure.get('rqt_gui', {}))
        entities.append(OpaqueFunction(function=_start_when_plotted,
                                       args=[rqt, _plotted_topics(perspective)]))
    if robot != 'ur5' or 'workers' not in role or _arg(context, 'skip_preflight') == 'true':
        return entities
    # A cube task on the arm drives a 2F-85: the preflight checks that it answers, too.
    arm_cfg = load('env_worker', EnvWorkerConfig, {**task_override, 'backend': 'ur5'})
    robotiq = needs_object_pose(arm_cfg) and arm_cfg.cell.gripper == 'robotiq'
    return _after_preflight(_arg(context, 'robot_ip'), config, robotiq, entities)


class PreflightFailed(RuntimeError):
    """The robot failed its preflight check: the launch ends with a non-zero exit status."""


def _after_preflight(robot_ip: str, config: str, gripper: bool, entities: list) -> list:
    """Run async-rl-preflight (with the gripper); start ``entities`` only if it passes."""
    cmd = [ExecutableInPackage('async-rl-preflight', PACKAGE), '--robot-ip', robot_ip,
           '--config', config]
    if gripper:
        cmd += ['--gripper', 'robotiq']
    preflight = ExecuteProcess(cmd=cmd, name='preflight', output='screen')

    def on_exit(event, context):
        if event.returncode == 0:
            return [LogInfo(msg='preflight passed: starting the nodes')] + entities
        # An error in a handler is how a launch ends with a non-zero exit status (ros2 launch
        # exits 1 and logs this one line), so a script or a service sees the failure.
        raise PreflightFailed(f'preflight of {robot_ip} failed (exit status '
                              f'{event.returncode}): nothing started; fix the robot or pass '
                              'skip_preflight:=true')

    return [RegisterEventHandler(OnProcessExit(target_action=preflight, on_exit=on_exit)),
            preflight]
