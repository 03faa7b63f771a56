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
ROS 2 transport between two hosts: transitions/s and weight latency with 0 % and 30 % loss.

The two-host variant of ``bench/ros_transport.py``: the same publishers and the same
receiving paths, with the ends in two network namespaces made by ``tools/two_hosts.sh``
(a worker host ``arl_workers`` and a learner host ``arl_learner`` joined by a switch), DDS
set up by the shipped ``config/cyclonedds_two_hosts.xml`` (unicast discovery, 1472-byte UDP
payloads). For each packet loss (each direction of the link):

* transitions: a worker-like process on the worker host publishes ``TransitionBatch`` of 64
  transitions (the shipped ``transition_batch``) as fast as it can; on the learner host the
  learner's ingest path (subscription -> DoubleBuffer -> ``msg_to_batch``) counts what comes
  out;
* weights: a shard-like process on the learner host posts the shipped actor and codec on a
  shard's two topics at 20 Hz; on the worker host a worker's ``WeightReceiver`` assembles
  them and the send-to-assembled latency is recorded (one clock: the namespaces share the
  machine).

With ``--security`` it measures SROS2 instead (``tools/sros2_keystore.sh`` makes a keystore in a
temporary folder; each end runs in its role's enclave, on the product's topics, with no loss):
the same two measurements with security off and on (the cost of authentication, encryption
and access control), then rogue weights: a publisher without the keystore, and publishers
with it in the worker's and the learner's roles, post weights a worker would accept, and a
secured worker counts what it assembles (``rogue_weights_accepted``, goal 0).

Needs root (namespaces), iproute2, and nftables when the kernel lacks ``sch_netem``; run with
the ROS 2 workspace sourced: ``sudo -E python3 bench/ros_two_hosts.py [--quick] [--security]``.
The namespaces are removed at the end. The last line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
TWO_HOSTS = HERE.parent / 'tools' / 'two_hosts.sh'
KEYSTORE_SH = HERE.parent / 'tools' / 'sros2_keystore.sh'
#: Enclave of each end with security on (the roles of config/sros2).
ENCLAVES = {'transitions-out': '/async_rl_ros/worker', 'transitions-in': '/async_rl_ros/learner',
            'weights-out': '/async_rl_ros/shard', 'weights-in': '/async_rl_ros/worker'}
LOSSES = (0, 30)
BATCH = 64
RATE_HZ = 20.0
DRAIN_S = 2.0


# ---------------------------------------------------------------------- the ends (namespaced)
def _spin_until_stopped(node) -> None:
    """Spin ``node`` until SIGINT or SIGTERM (set after rclpy's own handlers)."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    while not stop and rclpy.ok():
        executor.spin_once(timeout_sec=0.05)
    executor.remove_node(node)


def receive_transitions() -> dict:
    """Learner host: count the transitions out of the learner's ingest path until stopped."""
    import rclpy
    from ros_transport import IngestCounter

    rclpy.init()
    node = rclpy.create_node('bench_learner')
    ingest = IngestCounter(node)
    _spin_until_stopped(node)
    rate = ingest.finish(BATCH)
    node.destroy_node()
    rclpy.try_shutdown()
    return {'transitions_per_s': rate, 'batches': len(ingest.times)}


def receive_weights() -> dict:
    """Worker host: receive the weights as a worker does, record send-to-assembled latency."""
    import rclpy
    from ros_transport import WeightsReceiver

    rclpy.init()
    node = rclpy.create_node('bench_worker_weights')
    weights = WeightsReceiver(node)
    _spin_until_stopped(node)
    node.destroy_node()
    rclpy.try_shutdown()
    return {'latencies_ms': weights.assembled}


def end(role: str, seconds: float, count: int, rate_hz: float, product: bool) -> None:
    """Run one end in this (namespaced) process; a receiver prints a JSON line."""
    sys.path.insert(0, str(HERE))
    import ros_transport

    if product:
        ros_transport.use_product_topics()

    if role == 'transitions-out':
        ros_transport._publish_transitions(BATCH, seconds)
    elif role == 'weights-out':
        ros_transport._publish_weights(count, rate_hz)
    elif role == 'transitions-in':
        print(json.dumps(receive_transitions()), flush=True)
    else:
        print(json.dumps(receive_weights()), flush=True)


# ---------------------------------------------------------------------- orchestration
def _hosts(*args: str) -> str:
    done = subprocess.run(['bash', str(TWO_HOSTS), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f'two_hosts.sh {" ".join(args)}: {done.stderr.strip()}')
    return done.stdout.strip()


def _start(host: str, role: str, options: list[str], env: dict | None) -> subprocess.Popen:
    return subprocess.Popen(
        ['bash', str(TWO_HOSTS), 'exec', host, sys.executable, __file__, '--end', role,
         *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env=env)


def _secured(keystore: str | None, enclave: str | None) -> dict | None:
    """Return the environment of an end in ``enclave`` (``None``: no security)."""
    if keystore is None or enclave is None:
        return None
    return dict(os.environ, ROS_SECURITY_ENABLE='true', ROS_SECURITY_STRATEGY='Enforce',
                ROS_SECURITY_KEYSTORE=keystore, ROS_SECURITY_ENCLAVE_OVERRIDE=enclave)


def _pair(receiver: tuple[str, str], sender: tuple[str, str], options: list[str],
          timeout: float, envs: tuple[dict | None, dict | None] = (None, None)) -> dict:
    """Run a receiving end, then a sending end; return the receiver's JSON."""
    rx = _start(*receiver, options, envs[0])
    time.sleep(1.0)
    tx = _start(*sender, options, envs[1])
    try:
        tx.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(tx.pid, signal.SIGKILL)
    time.sleep(DRAIN_S)
    rx.send_signal(signal.SIGINT)
    out, err = rx.communicate(timeout=60)
    lines = [line for line in out.splitlines() if line.startswith('{')]
    if not lines:
        raise RuntimeError(f'{receiver[1]} printed no result: {err.strip()[-2000:]}')
    return json.loads(lines[-1])


def measure(loss: int, seconds: float, count: int, rate_hz: float,
            keystore: str | None = None, product: bool = False) -> dict:
    """
    Return transitions/s and weight latencies with ``loss`` % packet loss.

    :param keystore: run every end in its enclave of this SROS2 keystore.
    :param product: use the product's topics (what an SROS2 policy allows).
    """
    print(_hosts('loss', str(loss)), flush=True)
    options = ['--seconds', str(seconds), '--count', str(count), '--rate-hz', str(rate_hz)]
    options += ['--product-topics'] if product else []
    envs = {role: _secured(keystore, enclave) for role, enclave in ENCLAVES.items()}
    t = _pair(('learner', 'transitions-in'), ('workers', 'transitions-out'), options,
              timeout=seconds + 60, envs=(envs['transitions-in'], envs['transitions-out']))
    w = _pair(('workers', 'weights-in'), ('learner', 'weights-out'), options,
              timeout=count / rate_hz + 60, envs=(envs['weights-in'], envs['weights-out']))
    lat = w['latencies_ms']
    pct = {q: float(np.percentile(lat, q)) if lat else float('nan') for q in (50, 99)}
    return {'transitions_per_s': t['transitions_per_s'], 'weights_p50_ms': pct[50],
            'weights_p99_ms': pct[99], 'weights_assembled': len(lat), 'weights_sent': count}


#: Senders of rogue weights: what each is, and its enclave (``None``: no keystore at all).
ROGUES = (('no keystore', None), ('worker role', '/async_rl_ros/worker'),
          ('learner role', '/async_rl_ros/learner'))


def security(seconds: float, count: int, rate_hz: float) -> tuple[dict, dict, dict]:
    """Measure with SROS2 off and on, then the rogue senders; return the three results."""
    with tempfile.TemporaryDirectory(prefix='async_rl_keystore_') as keystore:
        made = subprocess.run(['bash', str(KEYSTORE_SH), keystore], capture_output=True,
                              text=True)
        if made.returncode != 0:
            raise RuntimeError(f'sros2_keystore.sh: {made.stderr.strip()[-2000:]}')
        off = measure(0, seconds, count, rate_hz, product=True)
        on = measure(0, seconds, count, rate_hz, keystore, product=True)
        options = ['--seconds', str(seconds), '--count', str(count), '--rate-hz', str(rate_hz),
                   '--product-topics']
        worker = _secured(keystore, ENCLAVES['weights-in'])
        rogue = {}
        for name, enclave in ROGUES:
            got = _pair(('workers', 'weights-in'), ('learner', 'weights-out'), options,
                        timeout=count / rate_hz + 60, envs=(worker, _secured(keystore, enclave)))
            rogue[name] = len(got['latencies_ms'])
    return off, on, rogue


def _report_security(off: dict, on: dict, rogue: dict, count: int) -> None:
    print(f'{"SROS2":>6} | {"transitions/s":>14} | {"weights p50 ms":>14} | {"p99 ms":>8} | '
          'assembled')
    for name, r in (('off', off), ('on', on)):
        print(f'{name:>6} | {r["transitions_per_s"]:>14,.0f} | {r["weights_p50_ms"]:>14.2f} | '
              f'{r["weights_p99_ms"]:>8.2f} | {r["weights_assembled"]}/{r["weights_sent"]}')
    for name, accepted in rogue.items():
        print(f'rogue weights, {name}: {accepted} of {count} accepted by a secured worker')
    summary = {'distro': os.environ.get('ROS_DISTRO'),
               'rogue_weights_sent': count * len(rogue),
               'rogue_weights_accepted': sum(rogue.values())}
    for name, r in (('off', off), ('on', on)):
        summary.update({f'security_{name}_transitions_per_s_b64': round(r['transitions_per_s']),
                        f'security_{name}_weights_p50_ms': round(r['weights_p50_ms'], 2),
                        f'security_{name}_weights_p99_ms': round(r['weights_p99_ms'], 2),
                        f'security_{name}_weights_assembled': r['weights_assembled']})
    print(json.dumps(summary))


def _skip(reason: str) -> None:
    print(f'skipped: {reason}')
    keys = [f'{k}_loss{p}' for p in LOSSES for k in ('transitions_per_s_b64', 'weights_p99_ms')]
    print(json.dumps({'distro': os.environ.get('ROS_DISTRO'), **dict.fromkeys(keys),
                      'skipped': reason}))


def main() -> None:
    """Run the benchmark and print a table and a JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--quick', action='store_true', help='short runs (about 1 min)')
    parser.add_argument('--rate-hz', type=float, default=RATE_HZ,
                        help='weights published per second (default %(default)s)')
    parser.add_argument('--losses', default=','.join(map(str, LOSSES)),
                        help='packet losses in %% to measure (default %(default)s)')
    parser.add_argument('--security', action='store_true',
                        help='measure SROS2 instead: off against on, and rogue weights')
    parser.add_argument('--product-topics', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--end', choices=['transitions-in', 'transitions-out', 'weights-in',
                                          'weights-out'], help=argparse.SUPPRESS)
    parser.add_argument('--seconds', type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument('--count', type=int, default=400, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.end:
        end(args.end, args.seconds, args.count, args.rate_hz, args.product_topics)
        return
    try:
        import rclpy  # noqa: F401
        import async_rl_ros_interfaces.msg  # noqa: F401 -- the built messages are needed
    except ImportError as exc:
        _skip(f'ROS 2 is not available ({exc}); source a ROS 2 workspace with '
              'async_rl_ros_interfaces built')
        return
    if os.geteuid() != 0 or shutil.which('ip') is None:
        _skip('needs root and iproute2 (network namespaces)')
        return
    seconds, count = (3.0, 60) if args.quick else (10.0, 400)
    if args.security and shutil.which('ros2') is None:
        _skip('--security needs the ros2 command with sros2 (tools/sros2_keystore.sh)')
        return
    os.environ.setdefault('ROS_DOMAIN_ID', '63')   # the keystore is signed for one domain
    results = {}
    subprocess.run(['bash', str(TWO_HOSTS), 'down'], capture_output=True)
    print(_hosts('up'), flush=True)
    try:
        if args.security:
            _report_security(*security(seconds, count, args.rate_hz), count)
            return
        for loss in [int(x) for x in args.losses.split(',')]:
            results[loss] = measure(loss, seconds, count, args.rate_hz)
    finally:
        subprocess.run(['bash', str(TWO_HOSTS), 'down'], capture_output=True)
    print(f'{"loss":>5} | {"transitions/s":>14} | {"weights p50 ms":>14} | '
          f'{"p99 ms":>8} | assembled')
    for loss, r in results.items():
        print(f'{loss:>4}% | {r["transitions_per_s"]:>14,.0f} | {r["weights_p50_ms"]:>14.2f} | '
              f'{r["weights_p99_ms"]:>8.2f} | {r["weights_assembled"]}/{r["weights_sent"]}')
    summary = {'distro': os.environ.get('ROS_DISTRO')}
    for loss, r in results.items():
        summary.update({f'transitions_per_s_b64_loss{loss}': round(r['transitions_per_s']),
                        f'weights_p50_ms_loss{loss}': round(r['weights_p50_ms'], 2),
                        f'weights_p99_ms_loss{loss}': round(r['weights_p99_ms'], 2),
                        f'weights_assembled_loss{loss}': r['weights_assembled'],
                        f'weights_sent_loss{loss}': r['weights_sent']})
    print(json.dumps(summary))


if __name__ == '__main__':
    main()
