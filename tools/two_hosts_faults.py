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
Training on two hosts (network namespaces) through packet loss and a cut link, measured.

Sets the hosts up with ``tools/two_hosts.sh``, starts ``train.launch.py role:=learner`` in
``arl_learner`` and ``role:=workers`` (two simulated workers) in ``arl_workers``, and records
from both sides: a probe node on the learner host takes ``/learner/stats`` (TrainingStats),
``/workers/status`` and ``/diagnostics``; one on the worker host takes ``/workers/status``,
which it keeps receiving while the link is cut. Once both workers act with learned weights it
runs the phases

    before  ->  loss (PCT % each way)  ->  after loss  ->  cut (link down)  ->  after cut

and prints per phase: transitions/s into the learner, the learner's policy lag, the workers'
lag behind the learner's version, weight packets rejected, batches rejected (malformed or
duplicated) and dropped, the workers' state and versions during the cut, and how long after
the link came back the learner got data and the workers got newer weights. The last line is a
JSON summary. Run as root, with a ROS 2 workspace that has async_rl_ros built sourced::

    sudo -E python3 tools/two_hosts_faults.py [--phase-s 60] [--loss 30] [--cut-s 10]

The namespaces are removed at the end (also after an error or Ctrl-C).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
TWO_HOSTS = REPO / 'tools' / 'two_hosts.sh'
CONFIG = REPO / 'async_rl_ros' / 'config' / 'train.yaml'
WORKERS = 2
READY_TIMEOUT_S = 420.0
SETTLE_S = 20.0  # s after both workers act with learned weights: the start-up burst drains


# ---------------------------------------------------------------------- probe (in a namespace)
def probe(side: str, out: str) -> None:
    """Record what one host sees as JSON lines (``t``: wall clock) until SIGINT / SIGTERM."""
    import rclpy
    from rclpy.executors import ExternalShutdownException

    from async_rl_ros.ros import qos, topics
    from async_rl_ros_interfaces.msg import TrainingStats, WorkerStatus
    from diagnostic_msgs.msg import DiagnosticArray

    rclpy.init()
    node = rclpy.create_node(f'fault_probe_{side}')
    sink = open(out, 'a', encoding='utf-8')

    def write(kind: str, **fields) -> None:
        sink.write(json.dumps({'t': time.time(), 'kind': kind, **fields}) + '\n')
        sink.flush()

    def on_stats(msg) -> None:
        values = dict(zip(msg.names, msg.values))
        write('stats', version=msg.policy_version, env_steps=msg.env_steps,
              updates=msg.updates, lag=msg.policy_lag,
              **{k: values.get(k) for k in ('transport/rejected_batches',
                                            'transport/dropped_batches',
                                            'transport/rejected_weights')})

    def on_status(msg) -> None:
        write('worker', id=msg.worker_id, state=msg.state, version=msg.policy_version,
              steps=msg.steps, sent=msg.batches_sent, accepted=msg.weights_accepted,
              rejected=msg.weights_rejected, policies=msg.policies_received,
              steps_per_s=msg.steps_per_s)

    def on_diagnostics(msg) -> None:
        for status in msg.status:
            if status.name == 'learner: ingest' or status.name.startswith('env_worker: '):
                write('diag', name=status.name, values={v.key: v.value for v in status.values})

    node.create_subscription(WorkerStatus, topics.WORKER_STATUS, on_status, qos.STATUS)
    node.create_subscription(TrainingStats, topics.TRAINING_STATS, on_stats, qos.METRICS)
    if side == 'learner':
        node.create_subscription(DiagnosticArray, topics.DIAGNOSTICS, on_diagnostics,
                                 qos.DIAGNOSTICS)
    signal.signal(signal.SIGTERM, lambda *_: rclpy.try_shutdown())
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    sink.close()
    rclpy.try_shutdown()


# ---------------------------------------------------------------------- orchestration
def _hosts(*args: str, check: bool = True) -> str:
    done = subprocess.run(['bash', str(TWO_HOSTS), *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f'two_hosts.sh {" ".join(args)}: {done.stderr.strip()}')
    return done.stdout.strip()


def _start(host: str, argv: list[str], log: pathlib.Path) -> subprocess.Popen:
    """Start ``argv`` in ``host``'s namespace (its own session; SIGINT as from a terminal)."""
    def reset():  # background children inherit an ignored SIGINT: ros2 launch needs it
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    return subprocess.Popen(['nice', '-n', '5', 'bash', str(TWO_HOSTS), 'exec', host, *argv],
                            stdout=open(log, 'w'), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=reset,
                            start_new_session=True)


def _stop(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _config(directory: pathlib.Path, slack: int | None) -> pathlib.Path:
    """Write the shipped configuration with an endless budget and logs under ``directory``."""
    import yaml

    tree = yaml.safe_load(CONFIG.read_text(encoding='utf-8'))
    learner = tree['learner']['ros__parameters']
    learner.update(total_env_steps=10**9, eval_every=10**9, log_dir=str(directory / 'log'))
    if slack is not None:
        learner['rate_limit_slack'] = slack
    learner['checkpoint'].update(interval_steps=0, directory=str(directory / 'checkpoints'))
    path = directory / 'train.yaml'
    path.write_text(yaml.safe_dump(tree), encoding='utf-8')
    return path


def _records(path: pathlib.Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding='utf-8').splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut short by the probe's stop
    return out


def _ready(learner_log: pathlib.Path) -> bool:
    """Return whether both workers act with learned weights (policy version >= 1)."""
    versions = {}
    for r in _records(learner_log):
        if r['kind'] == 'worker':
            versions[r['id']] = r['version']
    return len(versions) >= WORKERS and min(versions.values()) >= 1


# ---------------------------------------------------------------------- analysis
def _interp(series: list[tuple[float, float]], t: float) -> float | None:
    """Return the value of a step series (time-ordered) at ``t`` (the last one before)."""
    value = None
    for when, v in series:
        if when > t:
            break
        value = v
    return value


def _linear(series: list[tuple[float, float]], t: float) -> float | None:
    """Return a time-ordered series at ``t``, linear between its samples."""
    for (t0, v0), (t1, v1) in zip(series, series[1:]):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * (t - t0) / max(t1 - t0, 1e-9)
    return None


def analyse(learner: list[dict], workers: list[dict], phases: list[tuple[str, float, float]]
            ) -> dict:
    """Return per-phase figures from the probes' records."""
    stats = [r for r in learner if r['kind'] == 'stats']
    version_at = [(r['t'], r['version']) for r in stats]
    local = collections.defaultdict(list)  # worker id -> statuses seen on the worker host
    for r in workers:
        if r['kind'] == 'worker':
            local[r['id']].append(r)
    ingest = [r for r in learner if r['kind'] == 'diag' and r['name'] == 'learner: ingest']
    received = collections.defaultdict(list)  # worker id -> (t, batches the learner counted)
    for r in learner:
        if r['kind'] == 'diag' and r['name'].startswith('env_worker: worker_'):
            received[int(r['name'].rsplit('_', 1)[1])].append(
                (r['t'], int(r['values'].get('batches', 0))))
    out = {}
    for name, start, end in phases:
        s = [r for r in stats if start <= r['t'] <= end]
        row: dict = {'seconds': round(end - start, 1)}
        if len(s) >= 2:
            dt = s[-1]['t'] - s[0]['t']
            row['transitions_per_s'] = round((s[-1]['env_steps'] - s[0]['env_steps']) / dt, 1)
            row['updates_per_s'] = round((s[-1]['updates'] - s[0]['updates']) / dt, 1)
            row['versions'] = [s[0]['version'], s[-1]['version']]
            row['policy_lag_mean'] = round(sum(r['lag'] for r in s) / len(s), 2)
            row['policy_lag_max'] = round(max(r['lag'] for r in s), 2)
            for key in ('rejected_batches', 'dropped_batches', 'rejected_weights'):
                a, b = s[0][f'transport/{key}'], s[-1][f'transport/{key}']
                row[key] = None if a is None or b is None else int(b - a)
        lags, rejected, states, held, sent, got = [], 0, set(), {}, 0, 0
        for worker_id, seen in sorted(local.items()):
            w = [r for r in seen if start <= r['t'] <= end]
            if not w:
                continue
            states |= {r['state'] for r in w}
            rejected += w[-1]['rejected'] - w[0]['rejected']
            held[worker_id] = sorted({r['version'] for r in w})
            row.setdefault('worker_steps', []).append(w[-1]['steps'] - w[0]['steps'])
            sent_at = [(r['t'], r['sent']) for r in seen]
            sent += (_interp(sent_at, end) or 0) - (_interp(sent_at, start) or 0)
            counted = received.get(worker_id, [])
            got += (_interp(counted, end) or 0) - (_interp(counted, start) or 0)
            for r in w:  # the learner's version then (2 Hz samples: interpolated)
                v = _linear(version_at, r['t'])
                if v is not None and r['version'] >= 0:
                    lags.append(max(0.0, v - r['version']))
        row['worker_states'] = sorted(states)
        row['worker_versions'] = {str(k): v if len(v) <= 3 else [v[0], '...', v[-1]]
                                  for k, v in held.items()}
        row['worker_weights_rejected'] = rejected
        row['batches_sent'], row['batches_received'] = sent, got
        if lags:
            row['worker_lag_mean'] = round(sum(lags) / len(lags), 1)
            row['worker_lag_max'] = round(max(lags))
        i = [r for r in ingest if start <= r['t'] <= end]
        if len(i) >= 2:
            reasons = {k: int(v) - int(i[0]['values'].get(k, 0))
                       for k, v in i[-1]['values'].items() if k.startswith('rejected_')}
            row['ingest_rejected_by_reason'] = reasons
        out[name] = row
    # recovery after the cut: first learner data, first newer weights on each worker
    cut = [p for p in phases if p[0] == 'cut']
    if cut:
        up = cut[0][2]
        before = _interp([(r['t'], r['env_steps']) for r in stats], up)
        first = next((r['t'] for r in stats if r['t'] > up and r['env_steps'] > before), None)
        out['cut']['learner_data_after_s'] = None if first is None else round(first - up, 1)
        resumed = {}
        for worker_id, seen in sorted(local.items()):
            held = _interp([(r['t'], r['version']) for r in seen], up)
            newer = next((r['t'] for r in seen if r['t'] > up and r['version'] > held), None)
            resumed[str(worker_id)] = None if newer is None else round(newer - up, 1)
        out['cut']['worker_new_weights_after_s'] = resumed
    # batches the workers sent and the learner counted, from the first phase to the end
    first, last = phases[0][1], phases[-1][2]
    out['batches_sent_received'] = {}
    for k in sorted(local):
        sent_at = [(r['t'], r['sent']) for r in local[k]]
        out['batches_sent_received'][str(k)] = [
            (_interp(sent_at, last) or 0) - (_interp(sent_at, first) or 0),
            (_interp(received[k], last) or 0) - (_interp(received[k], first) or 0)]
    return out


def _table(result: dict, phases: list[tuple[str, float, float]]) -> str:
    cols = [('transitions/s', 'transitions_per_s'), ('updates/s', 'updates_per_s'),
            ('lag mean', 'policy_lag_mean'), ('lag max', 'policy_lag_max'),
            ('worker lag', 'worker_lag_mean'), ('rej. weights', 'worker_weights_rejected'),
            ('rej. batches', 'rejected_batches'), ('sent', 'batches_sent'),
            ('received', 'batches_received')]
    lines = [f'{"phase":<11}' + ''.join(f'{c:>14}' for c, _ in cols)]
    for name, _, _ in phases:
        row = result[name]
        lines.append(f'{name:<11}' + ''.join(f'{str(row.get(k, "-")):>14}' for _, k in cols))
    return '\n'.join(lines)


def run(args: argparse.Namespace) -> dict:
    """Set up, train through the phases, tear down; return the figures."""
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix='arl_two_hosts_'))
    out.mkdir(parents=True, exist_ok=True)
    config = pathlib.Path(args.config) if args.config else _config(out, args.slack)
    _hosts('down')
    print(_hosts('up'), flush=True)
    procs: list[subprocess.Popen] = []
    phases: list[tuple[str, float, float]] = []
    try:
        for side in ('learner', 'workers'):
            procs.append(_start(side, [sys.executable, __file__, '--probe', side, '--out',
                                       str(out / f'probe_{side}.jsonl')],
                                out / f'probe_{side}.log'))
        procs.append(_start('learner', ['ros2', 'launch', 'async_rl_ros', 'train.launch.py',
                                        'role:=learner', f'config:={config}', 'device:=cpu'],
                            out / 'learner.log'))
        procs.append(_start('workers', ['ros2', 'launch', 'async_rl_ros', 'train.launch.py',
                                        'role:=workers', f'num_workers:={WORKERS}',
                                        f'config:={config}'], out / 'workers.log'))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _ready(out / 'probe_learner.jsonl'):
            if time.monotonic() > deadline:
                raise RuntimeError(f'workers never acted with learned weights (logs: {out})')
            time.sleep(2.0)
        print(f'training across the hosts; logs in {out}', flush=True)
        time.sleep(SETTLE_S)

        def phase(name: str, seconds: float) -> None:
            start = time.time()
            time.sleep(seconds)
            phases.append((name, start, time.time()))
            print(f'phase {name}: {seconds:.0f} s', flush=True)

        phase('before', args.phase_s)
        print(_hosts('loss', str(args.loss)), flush=True)
        phase('loss', args.phase_s)
        print(_hosts('loss', '0'), flush=True)
        phase('after_loss', args.phase_s)
        start = time.time()
        print(_hosts('cut', str(args.cut_s)), flush=True)
        phases.append(('cut', start, time.time()))
        phase('after_cut', args.phase_s)
    finally:
        for proc in reversed(procs):
            _stop(proc)
        _hosts('down', check=False)
    (out / 'phases.json').write_text(json.dumps(phases), encoding='utf-8')
    return report(out)


def report(out: pathlib.Path) -> dict:
    """Analyse the records of a run in ``out``; print the table; return the figures."""
    phases = [tuple(p) for p in json.loads((out / 'phases.json').read_text(encoding='utf-8'))]
    result = analyse(_records(out / 'probe_learner.jsonl'),
                     _records(out / 'probe_workers.jsonl'), phases)
    result['phases'] = [name for name, _, _ in phases]
    (out / 'result.json').write_text(json.dumps(result, indent=1), encoding='utf-8')
    print(_table(result, phases))
    return result


def main() -> None:
    """Run the fault experiment (or, with ``--probe``, one host's probe)."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--phase-s', type=float, default=60.0, help='seconds per phase')
    parser.add_argument('--loss', type=int, default=30, help='packet loss, %% each way')
    parser.add_argument('--cut-s', type=float, default=10.0, help='seconds the link is down')
    parser.add_argument('--config', help='training configuration (default: the shipped one '
                        'with an endless budget)')
    parser.add_argument('--slack', type=int, help='learner.rate_limit_slack (default: the '
                        'shipped one; 0: workers not paced by the learner)')
    parser.add_argument('--out', help='directory of logs and records (default: a new one)')
    parser.add_argument('--report', metavar='DIR', help='only analyse the records of an '
                        'earlier run in DIR')
    parser.add_argument('--probe', choices=['learner', 'workers'], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(args.probe, args.out)
        return
    if args.report:
        result = report(pathlib.Path(args.report))
    elif os.geteuid() != 0:
        sys.exit('two_hosts_faults: needs root (network namespaces)')
    else:
        result = run(args)
    distro = os.environ.get('ROS_DISTRO')
    print(json.dumps({'distro': distro, **{k: result[k] for k in result['phases']},
                      'batches_sent_received': result['batches_sent_received']}))


if __name__ == '__main__':
    main()
