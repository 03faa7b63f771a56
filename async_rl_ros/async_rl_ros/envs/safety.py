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
The one safety filter every joint-velocity command passes before it reaches a robot.

Order of the checks (each may only shrink what the previous ones let through):

1. non-finite values become 0;
2. speed: ``|qd_i| <= max_joint_speed_i``;
3. acceleration: ``|qd_i - qd_prev_i| <= max_joint_accel * dt``;
4. joint limits with braking: a joint moving towards its (margin-shrunk) limit is capped at the
   largest speed from which it can still stop in time with ``max_joint_accel``:
   ``v * dt + v**2 / (2 a) <= distance``. The cap shrinks by at most ``a * dt`` per step, so it
   never asks for more deceleration than step 3 allows;
5. workspace: the whole stopping path -- one period at the command, then a uniform
   deceleration at ``max_joint_accel`` -- must keep the flange inside the margin-shrunk box,
   and with a tool (``tool_length`` > 0: a gripper) its tip too: the box is convex, so the
   whole flange-to-tip segment stays in it (the fingers above the table).
   Otherwise the command is blended towards the pure braking command (the previous command
   slowed by ``a * dt``, whose stopping path was already verified one step earlier) by
   bisection, which stops the arm at the box boundary rather than letting it leave.

When the flange is already outside the box (a bad start state), any command whose path does
not increase the violation is allowed, so the arm can move back in.

Every intervention is counted by reason in :attr:`SafetyFilter.counts`.

Limits change while running through :meth:`SafetyFilter.update`: whatever the new limits
tighten is in force for the very next command, whatever they loosen waits for
:meth:`SafetyFilter.episode_boundary` (the environment calls it on reset), so a change can
never let one command through that both the old and the new limits would refuse.
"""

from __future__ import annotations

from collections import Counter
import dataclasses
import math
import typing

from async_rl_ros.core.config import SafetyConfig, TaskConfig
from async_rl_ros.envs.ur5_kinematics import DH_A, DH_D, fk_position
import numpy as np

__all__ = ['SafetyFilter', 'REASONS', 'intersect_limits', 'limit_changes', 'reach_radii',
           'start_fit']

REASONS = ('non_finite', 'speed', 'accel', 'joint_limit', 'workspace')


def reach_radii(tool: float = 0.0) -> tuple[float, ...]:
    """
    Return upper bounds (m) of the distance from each joint's axis to the guarded points.

    Moving joint i by dq (rad) moves the flange, or a point ``tool`` m beyond it along the
    flange's z axis, by at most ``radii[i] * |dq|``. Sums of the DH lengths after joint i,
    leaving out those parallel to its axis (d1 for joint 1, d4 for joints 2-4 whose axes are
    parallel, d5 for joint 5, d6 + tool for joint 6). A test checks the bound numerically.
    """
    d6 = DH_D[5] + tool
    return (-DH_A[1] - DH_A[2] + DH_D[3] + DH_D[4] + d6,
            -DH_A[1] - DH_A[2] + DH_D[4] + d6,
            -DH_A[2] + DH_D[4] + d6,
            DH_D[4] + d6,
            d6,
            0.0)


_RESOLUTION = 1e-3  # m: path segments shorter than this are judged by their end points
_MAX_FK = 24        # kinematics evaluations one path check may spend before it gives up
_PATH_SAMPLES = 32  # points a reset path (a joint-space straight line) is checked at


def intersect_limits(a: SafetyConfig, b: SafetyConfig) -> SafetyConfig:
    """
    Return the limits that both ``a`` and ``b`` allow (the tighter one of each value).

    Margins are folded into the bounds (the result has zero margins), so that a wider margin
    of one and a wider bound of the other combine correctly.
    """
    def shrunk(cfg: SafetyConfig) -> tuple[list[float], ...]:
        jm, wm = cfg.joint_margin, cfg.workspace_margin
        return ([x + jm for x in cfg.joint_lower], [x - jm for x in cfg.joint_upper],
                [x + wm for x in cfg.workspace_low], [x - wm for x in cfg.workspace_high])

    (jl_a, ju_a, wl_a, wh_a), (jl_b, ju_b, wl_b, wh_b) = shrunk(a), shrunk(b)
    return dataclasses.replace(
        a, joint_lower=[max(x, y) for x, y in zip(jl_a, jl_b)],
        joint_upper=[min(x, y) for x, y in zip(ju_a, ju_b)], joint_margin=0.0,
        max_joint_speed=[min(x, y) for x, y in zip(a.max_joint_speed, b.max_joint_speed)],
        max_joint_accel=min(a.max_joint_accel, b.max_joint_accel),
        workspace_low=[max(x, y) for x, y in zip(wl_a, wl_b)],
        workspace_high=[min(x, y) for x, y in zip(wh_a, wh_b)], workspace_margin=0.0)


def limit_changes(old: SafetyConfig, new: SafetyConfig) -> tuple[bool, bool]:
    """Return whether going from ``old`` to ``new`` tightens and whether it loosens a limit."""
    both = intersect_limits(old, new)
    tightens = _shrunk_values(both) != _shrunk_values(intersect_limits(old, old))
    loosens = _shrunk_values(both) != _shrunk_values(intersect_limits(new, new))
    return tightens, loosens


def start_fit(task: TaskConfig, safety: SafetyConfig, draws: int = 200,
              seed: int = 0, tool_length: float = 0.0) -> tuple[bool, int]:
    """
    Check the start poses of a configuration against its limits (deterministic).

    :param task: gives ``home_q`` and ``home_noise``.
    :param safety: the joint limits and the workspace box (with their margins).
    :param draws: number of ``home_q + uniform(-home_noise, home_noise)`` draws.
    :param seed: seed of the draws.
    :param tool_length: the tool whose tip the box holds too (see :class:`SafetyFilter`).
    :returns: whether ``home_q`` passes :meth:`SafetyFilter.pose_ok`, and how many draws do.
    """
    f = SafetyFilter(safety, 1.0, tool_length)
    home = np.asarray(task.home_q, dtype=np.float64)
    if task.home_noise == 0.0:
        ok = f.pose_ok(home)
        return ok, draws if ok else 0
    noise = np.random.default_rng(seed).uniform(-task.home_noise, task.home_noise, (draws, 6))
    return f.pose_ok(home), sum(f.pose_ok(home + n) for n in noise)


def _shrunk_values(cfg: SafetyConfig) -> tuple:
    return (tuple(cfg.joint_lower), tuple(cfg.joint_upper), tuple(cfg.max_joint_speed),
            cfg.max_joint_accel, tuple(cfg.workspace_low), tuple(cfg.workspace_high))


class SafetyFilter:
    """
    Stateful joint-velocity filter (rad/s in, rad/s out) for one arm.

    Written with scalar maths over the six joints: it runs at every control step of every
    worker, where numpy's per-call overhead on 6-element arrays would cost more than the maths.

    Not thread-safe: call :meth:`update` from the thread that filters (the environment
    queues changes for its stepping thread).

    :param cfg: limits.
    :param dt: control period (s): how long each command is held.
    :param tool_length: distance (m) from the flange to the tip of the tool along the
        flange's z axis (a gripper's fingertips); the box then holds the tip as well.
    """

    def __init__(self, cfg: SafetyConfig, dt: float, tool_length: float = 0.0):
        if not (math.isfinite(tool_length) and 0.0 <= tool_length <= 0.5):
            raise ValueError(f'tool_length {tool_length!r}: a length in [0, 0.5] m')
        self.tool = float(tool_length)
        self.radius = reach_radii(self.tool)
        self.dt = float(dt)
        self.prev = [0.0] * 6
        self.counts: Counter[str] = Counter()
        self.last_reasons: tuple[str, ...] = ()
        #: Limits waiting for the next episode boundary (they loosen some limit), or None.
        self.pending: SafetyConfig | None = None
        self._install(cfg)

    def _install(self, cfg: SafetyConfig) -> None:
        #: The limits in force.
        self.cfg = cfg
        self.accel = float(cfg.max_joint_accel)
        self.vmax = [float(v) for v in cfg.max_joint_speed]
        self.q_low = [lo + cfg.joint_margin for lo in cfg.joint_lower]
        self.q_high = [hi - cfg.joint_margin for hi in cfg.joint_upper]
        m = cfg.workspace_margin
        self.box_low = tuple(lo + m for lo in cfg.workspace_low)
        self.box_high = tuple(hi - m for hi in cfg.workspace_high)

    def update(self, cfg: SafetyConfig) -> tuple[bool, bool]:
        """
        Change the limits while running: tighter at once, looser at the next episode boundary.

        From the next command on, the filter enforces what both the limits in force and
        ``cfg`` allow; ``cfg`` itself takes over at :meth:`episode_boundary`.

        :param cfg: the new limits (validated).
        :returns: ``(tightened_now, loosening_deferred)``.
        """
        tightens, deferred = limit_changes(self.cfg, cfg)
        if deferred:
            if tightens:
                self._install(intersect_limits(self.cfg, cfg))
            self.pending = cfg
        else:
            self._install(cfg)  # what both allow is exactly what cfg allows
            self.pending = None
        return tightens, deferred

    def episode_boundary(self, dt: float | None = None) -> None:
        """
        Put the pending limits (and a new control period ``dt``, s) in force.

        Call it only while the arm is at rest, before the next episode's first command.
        """
        if self.pending is not None:
            self._install(self.pending)
            self.pending = None
        if dt is not None:
            self.dt = float(dt)
        self.reset()

    def reset(self, qd: np.ndarray | None = None) -> None:
        """Forget the previous command (the arm is at rest, or moving at ``qd`` rad/s)."""
        self.prev = [0.0] * 6 if qd is None else [float(v) for v in qd]
        self.last_reasons = ()

    @property
    def interventions(self) -> int:
        """Total number of interventions since construction."""
        return sum(self.counts.values())

    # ------------------------------------------------------------------ geometry
    def points(self, q: typing.Sequence[float]) -> list[tuple[float, float, float]]:
        """Return where the flange is, and the tool tip if there is a tool (m, base frame)."""
        q = [float(x) for x in q]
        if self.tool == 0.0:
            return [fk_position(q)]
        return [fk_position(q), fk_position(q, self.tool)]

    def pose_violation(self, q: typing.Sequence[float]) -> float:
        """Return how far (m) the worst guarded point at ``q`` lies outside the box."""
        return max(self.violation(p) for p in self.points(q))

    def pose_ok(self, q: np.ndarray) -> bool:
        """Return whether ``q`` (rad) is within the joint limits and its flange in the box."""
        if not all(lo <= x <= hi for x, lo, hi in zip(q, self.q_low, self.q_high)):
            return False
        return self.pose_violation(q) <= 0.0

    def path_ok(self, q0: np.ndarray, q1: np.ndarray) -> bool:
        """
        Check a reset move: a joint-space straight line from ``q0`` to ``q1`` (rad).

        :returns: whether it ends within the joint limits and never takes the flange further
            out of the box than it is at ``q0``.
        """
        if not all(lo <= x <= hi for x, lo, hi in zip(q1, self.q_low, self.q_high)):
            return False
        q0 = np.asarray(q0, dtype=np.float64)
        dq = np.asarray(q1, dtype=np.float64) - q0
        allowed = self.pose_violation(q0) + 1e-9
        return all(self.pose_violation(q0 + s * dq) <= allowed
                   for s in np.linspace(0.0, 1.0, _PATH_SAMPLES + 1)[1:])

    def violation(self, p: tuple[float, float, float]) -> float:
        """Return how far (m) the point ``p`` lies outside the shrunk box (0 inside)."""
        worst = 0.0
        for x, lo, hi in zip(p, self.box_low, self.box_high):
            worst = max(worst, lo - x, x - hi)
        return worst

    def _clearance(self, q: list[float], slack: float) -> float:
        """Return the distance (m) from the guarded points to the box grown by ``slack``."""
        lo, hi = self.box_low, self.box_high
        return min(min(x - lo[0], hi[0] - x, y - lo[1], hi[1] - y, z - lo[2], hi[2] - z)
                   for x, y, z in self.points(q)) + slack

    def stop_path(self, v: list[float]) -> list[float]:
        """Return the joint displacement (rad) of one period at ``v`` then braking at ``a``."""
        peak = max(abs(x) for x in v)
        scale = self.dt + peak / (2.0 * self.accel)
        return [x * scale for x in v]

    def _path_ok(self, q: list[float], v: list[float], clear_now: float, slack: float) -> bool:
        """
        Check that the guarded points stay in the box (grown by ``slack``) on the stopping path.

        Sound without dense sampling: moving joint i by ``dq_i`` moves a point by at most
        ``radius[i] * |dq_i|`` (:func:`reach_radii`), so on a segment of the joint-space path
        whose end points have clearances ``c_a`` and ``c_b`` no point can leave the box if
        ``c_a + c_b`` exceeds the segment's bound. Segments that fail the test are halved; a
        path that needs more than ``_MAX_FK`` evaluations is treated as unsafe (the caller
        then brakes).
        """
        delta = self.stop_path(v)
        bound = sum(r * abs(d) for r, d in zip(self.radius, delta))
        if clear_now >= bound:
            return True  # even the worst case cannot reach a face
        clear_end = self._clearance([a + d for a, d in zip(q, delta)], slack)
        if clear_end < 0.0:
            return False
        stack = [(0.0, clear_now, 1.0, clear_end)]
        evaluations = 1
        while stack:
            t0, ca, t1, cb = stack.pop()
            length = bound * (t1 - t0)
            if ca + cb >= length or length < _RESOLUTION:
                continue
            evaluations += 1
            if evaluations > _MAX_FK:
                return False
            tm = 0.5 * (t0 + t1)
            cm = self._clearance([a + d * tm for a, d in zip(q, delta)], slack)
            if cm < 0.0:
                return False
            stack.append((t0, ca, tm, cm))
            stack.append((tm, cm, t1, cb))
        return True

    # ------------------------------------------------------------------ filter
    def __call__(self, q: np.ndarray, qd_cmd: np.ndarray) -> np.ndarray:
        """
        Filter a joint-velocity command.

        :param q: measured joint positions (rad).
        :param qd_cmd: requested joint velocities (rad/s).
        :returns: the velocities that are safe to hold for one period (rad/s).
        """
        q = [float(x) for x in q]
        a, dt = self.accel, self.dt
        step = a * dt
        flags = [False] * 4  # non_finite, speed, accel, joint_limit
        v = [0.0] * 6
        caps = []
        for i in range(6):
            vi = float(qd_cmd[i])
            if not math.isfinite(vi):
                vi, flags[0] = 0.0, True
            vm = self.vmax[i]
            if vi > vm or vi < -vm:
                vi, flags[1] = (vm if vi > 0.0 else -vm), True
            p = self.prev[i]
            if vi > p + step or vi < p - step:
                vi, flags[2] = (p + step if vi > p else p - step), True
            # Braking caps towards each joint limit (rad/s); a joint past its soft limit gets 0.
            up = a * (math.sqrt(dt * dt + 2.0 * max(self.q_high[i] - q[i], 0.0) / a) - dt)
            down = a * (math.sqrt(dt * dt + 2.0 * max(q[i] - self.q_low[i], 0.0) / a) - dt)
            if vi > up or vi < -down:
                vi, flags[3] = (up if vi > up else -down), True
            v[i] = vi
            caps.append((down, up))
        reasons = [name for name, hit in zip(REASONS, flags) if hit]

        # Outside the box already (bad start state)? Then allow what does not make it worse.
        slack = self.pose_violation(q)
        clear_now = self._clearance(q, slack)
        if not self._path_ok(q, v, clear_now, slack):
            reasons.append('workspace')
            v = self._blend_to_brake(q, v, clear_now, slack, caps)

        self.prev = v
        self.last_reasons = tuple(reasons)
        if reasons:
            self.counts.update(reasons)
        return np.array(v)

    def _blend_to_brake(self, q, v, clear_now, slack, caps) -> list[float]:
        """Return the command closest to ``v`` on the segment to the braking command."""
        peak = max(abs(x) for x in self.prev)
        shrink = max(0.0, 1.0 - self.accel * self.dt / peak) if peak > 0.0 else 0.0
        brake = [min(max(p * shrink, -down), up) for p, (down, up) in zip(self.prev, caps)]
        if not self._path_ok(q, brake, clear_now, slack):
            return brake  # already in trouble (e.g. tracking error): decelerate at the limit
        lo, hi = 0.0, 1.0
        for _ in range(8):  # 1/256 of the way: finer than any controller resolves
            mid = 0.5 * (lo + hi)
            if self._path_ok(q, [b + mid * (x - b) for b, x in zip(brake, v)], clear_now, slack):
                lo = mid
            else:
                hi = mid
        return [b + lo * (x - b) for b, x in zip(brake, v)]
