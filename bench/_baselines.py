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
The public baselines the benches compare against: SB3 SAC + HER and sb3-contrib TQC + HER.

Each is built on the task as Gymnasium offers it (``gymnasium.make(ID)`` for ``gym:ID``, the
registered goal-conditioned view of a task of this package) with ``HerReplayBuffer`` and
rl-baselines3-zoo's tuned panda-gym hyperparameters (:data:`ZOO`); ``sac`` is SB3 SAC with its
own defaults on the flat task env. ``bench/sample_efficiency.py`` scores them against this
learner at env-step marks, ``bench/time_to_success.py`` on the wall clock. A module of the
benches, not a bench (its name starts with ``_``): SB3 is a bench extra, never a runtime need.
"""

from __future__ import annotations

#: rl-baselines3-zoo's tuned settings for panda-gym (DLR-RM/rl-baselines3-zoo,
#: hyperparams/tqc.yml: ``PandaReach-v1``, and ``PandaPush-v1`` = its ``her-defaults``, which
#: PickAndPlace, Slide and Stack share; panda-gym v3 renamed the same tasks). All use
#: ``HerReplayBuffer`` with ``goal_selection_strategy='future'``, ``n_sampled_goal=4`` and
#: ``MultiInputPolicy``; ``normalize`` is a ``VecNormalize`` with the entry's gamma.
#: hyperparams/sac.yml has no panda-gym entry: SAC takes the same settings without
#: ``n_critics`` (its ``FetchReach-v1`` entry is tqc.yml's reach entry less ``n_critics``).
#: Our UR5 reach task takes the reach entry (the zoo has none for it).
ZOO = {
    'reach': {'buffer_size': 1_000_000, 'ent_coef': 'auto', 'batch_size': 256, 'gamma': 0.95,
              'learning_rate': 1e-3, 'learning_starts': 1000, 'normalize': True,
              'net_arch': [64, 64], 'n_critics': 1},
    'her-defaults': {'buffer_size': 1_000_000, 'batch_size': 2048, 'gamma': 0.95,
                     'learning_rate': 1e-3, 'tau': 0.05, 'normalize': False,
                     'net_arch': [512, 512, 512], 'n_critics': 2},
}


def zoo_entry(task: str) -> dict:
    """Return the zoo settings the baselines use on ``task`` (reach tasks: the reach entry)."""
    name = task.rsplit(':', 1)[-1]
    return dict(ZOO['reach' if task == 'reach' or name.startswith('PandaReach')
                    else 'her-defaults'])


def baseline_env(task: str, env_cfg):
    """
    Return the task as the baselines see it: a Gymnasium goal-conditioned env.

    :param task: ``gym:ID`` (built with ``gymnasium.make(ID)``) or a task of this package
        (its registered id; the ``env_worker`` settings of ``env_cfg`` that differ from what
        that id runs, the task's own defaults included, are passed as overrides).
    :param env_cfg: the run's ``env_worker`` section (the one ours trains with).
    """
    import gymnasium

    from async_rl_ros.envs.goal_view import GYM_ENVS, task_config
    from async_rl_ros.envs.gym_task import resolve_env_id

    if task.startswith('gym:'):
        return gymnasium.make(resolve_env_id(task[len('gym:'):]))
    rows = [row for row in GYM_ENVS if row.task == task]
    if not rows:
        raise SystemExit(f'task {task!r} has no Gymnasium registration for the baselines')
    default = task_config(task).to_flat()  # pick_and_place: 10 Hz, no held starts
    flat = env_cfg.to_flat()
    overrides = {k: v for k, v in flat.items() if v != default.get(k) and k != 'task.name'}
    return gymnasium.make(rows[0].env_id, **overrides,  # and the time limit of env_cfg's rate
                          max_episode_steps=env_cfg.task.max_episode_steps)


def make_baseline(impl: str, task: str, seed: int, steps: int, env_cfg,
                  device: str = 'cpu'):
    """
    Build one baseline on ``task``: ``sac_her``, ``tqc_her`` (zoo settings) or ``sac``.

    ``sac`` is SB3 SAC with its own defaults and no HER on the flat task env (the benches'
    baseline before they took tasks).

    :param steps: the run's budget (the replay buffer never needs to hold more).
    :param env_cfg: the ``env_worker`` settings the run trains with.
    :returns: the model, its ``VecNormalize`` (``None`` without one) and an evaluation env
        of the kind it trains on.
    """
    from stable_baselines3 import HerReplayBuffer, SAC
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from async_rl_ros.envs.factory import build_env, outside_training

    if impl == 'sac':
        env, _ = build_env(env_cfg, training=True)
        eval_env, _ = build_env(env_cfg)
        return (_quiet(SAC('MlpPolicy', env, seed=seed, verbose=0, device=device)), None,
                eval_env)
    hp = zoo_entry(task)
    env, eval_env = baseline_env(task, env_cfg), baseline_env(task, outside_training(env_cfg))
    venv = normalize = DummyVecEnv([lambda: env])
    if not hp.pop('normalize'):
        normalize = None
    else:
        venv = normalize = VecNormalize(venv, gamma=hp['gamma'])
    policy_kwargs = {'net_arch': hp.pop('net_arch')}
    n_critics = hp.pop('n_critics')
    if impl == 'tqc_her':
        from sb3_contrib import TQC as Algo
        policy_kwargs['n_critics'] = n_critics
    elif impl == 'sac_her':
        Algo = SAC
    else:
        raise ValueError(f'unknown baseline {impl!r}')
    # The buffer never holds more than the run's steps: a smaller one is the same buffer.
    hp['buffer_size'] = min(hp['buffer_size'], steps)
    model = Algo('MultiInputPolicy', venv, replay_buffer_class=HerReplayBuffer,
                 replay_buffer_kwargs={'goal_selection_strategy': 'future',
                                       'n_sampled_goal': 4},
                 policy_kwargs=policy_kwargs, seed=seed, verbose=0, device=device, **hp)
    return _quiet(model), normalize, eval_env


def _quiet(model):
    """
    Give an SB3 model a logger with no outputs.

    Without one, every ``learn()`` call (one per evaluation mark) configures its own and
    leaves an empty ``SB3-<time>`` folder in the temporary directory.
    """
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def save_baseline(model, normalize, folder) -> None:
    """
    Store what a baseline needs to go on training: its model, replay buffer and normaliser.

    :param model: the SB3 model.
    :param normalize: its ``VecNormalize`` or ``None``.
    :param folder: an existing folder (``bench/_unfinished.py`` gives one per mark).
    """
    import pathlib
    import pickle

    folder = pathlib.Path(folder)
    model.save(folder / 'model.zip')
    model.save_replay_buffer(folder / 'replay.pkl')
    if normalize is not None:
        with open(folder / 'normalize.pkl', 'wb') as f:
            pickle.dump((normalize.obs_rms, normalize.ret_rms), f)


def load_baseline(model, normalize, folder, device: str = 'cpu'):
    """
    Return the model of :func:`save_baseline`'s ``folder``, on ``model``'s env, to go on with.

    ``normalize`` (the ``VecNormalize`` under that env, or ``None``) takes the saved
    statistics. The SB3 model restores its weights, optimisers, entropy coefficient and step
    count; the episode in progress starts over (SB3 resets the env at the next ``learn()``).
    """
    import pathlib
    import pickle
    import warnings

    folder = pathlib.Path(folder)
    loaded = type(model).load(folder / 'model.zip', env=model.get_env(), device=device)
    with warnings.catch_warnings():  # HER ends the saved episode there: what a resume wants
        warnings.filterwarnings('ignore', message='The last trajectory in the replay buffer')
        loaded.load_replay_buffer(folder / 'replay.pkl')
    if normalize is not None:
        with open(folder / 'normalize.pkl', 'rb') as f:
            normalize.obs_rms, normalize.ret_rms = pickle.load(f)
    return _quiet(loaded)
