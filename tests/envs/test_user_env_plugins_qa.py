"""A researcher's own env outside this package: found by id (entry points, ``"module:id"``), unknown ids in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401  (registers the ragen/ ids)
from ragen_envs import registration
from ragen_envs.contract import observes_images
from ragen_envs.registration import accepted_kwargs

USER_MODULE = textwrap.dedent('''
    import gymnasium as gym
    from gymnasium import spaces


    class EchoEnv(gym.Env):
        """A user's env that only subclasses gymnasium.Env."""

        def __init__(self, target: str = "yes", vision: bool = False):
            self.target = target
            self.action_space = spaces.Text(64)
            self.observation_space = spaces.Text(64)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return f"Say {self.target}", {}

        def step(self, action):
            won = self.target in action
            return "again", float(won), won, False, {"success": won}


    gym.register(id="qauser/Echo-v0", entry_point=EchoEnv)
    gym.register(id="qauser/EchoPicture-v0", entry_point=EchoEnv, kwargs={"vision": True})
''')


@pytest.fixture
def user_site(tmp_path: Path) -> Path:
    """A folder holding the user's module and an installed distribution whose ``ragen_envs`` entry point names
    it (what ``pip install`` of a package with ``[project.entry-points.ragen_envs]`` leaves in site-packages)."""
    (tmp_path / "qa_user_envs.py").write_text(USER_MODULE)
    dist = tmp_path / "qa_user_envs-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: qa-user-envs\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[ragen_envs]\nqa = qa_user_envs\n")
    return tmp_path


def _python(code: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"}, timeout=120)


def test_an_installed_entry_point_registers_its_ids_on_import_ragen_envs(user_site):
    """`import ragen_envs` (what every `ragen` command does) makes the package's ids known: before, a user env
    could reach `ragen train`/`eval`/`play` only by editing this package's ENV_SPECS."""
    done = _python("import gymnasium as gym, ragen_envs\n"
                   "env = gym.make('qauser/Echo-v0', target='ok')\n"
                   "print(env.reset(seed=0)[0])", user_site)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Say ok"


def test_a_broken_entry_point_is_one_warning_not_a_broken_import(user_site):
    (user_site / "qa_user_envs.py").write_text("raise RuntimeError('half-written module')\n")
    done = subprocess.run([sys.executable, "-c", "import ragen_envs, gymnasium as gym; print(len(gym.registry))"],
                          capture_output=True, text=True, env={"PYTHONPATH": str(user_site), "PATH": "/usr/bin:/bin"},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "entry point 'qa = qa_user_envs' failed (RuntimeError: half-written module)" in done.stderr


def test_module_prefix_form_is_found_as_gym_make_finds_it(user_site, monkeypatch):
    """``"module:id"`` (Gymnasium's own way to name an env of a module not yet imported) is what gym.make takes;
    the toolkit's checks refused it with "Namespace qa_user_envs:qauser not found"."""
    monkeypatch.syspath_prepend(str(user_site))
    monkeypatch.delitem(sys.modules, "qa_user_envs", raising=False)
    for env_id in ("qauser/Echo-v0", "qauser/EchoPicture-v0"):
        gym.registry.pop(env_id, None)
    try:
        assert registration.find_spec("qa_user_envs:qauser/Echo-v0").id == "qauser/Echo-v0"
        assert observes_images("qa_user_envs:qauser/EchoPicture-v0") is True
        assert observes_images("qa_user_envs:qauser/Echo-v0") is False
        assert accepted_kwargs("qa_user_envs:qauser/Echo-v0") == ["target", "vision"]
    finally:
        for env_id in ("qauser/Echo-v0", "qauser/EchoPicture-v0"):
            gym.registry.pop(env_id, None)


@pytest.mark.parametrize("env_id, expected", [
    ("Sokoban-v0", "Did you mean 'ragen/Sokoban-v0'"),  # the namespace left out
    ("ragen/Sokobn-v0", "Did you mean: `Sokoban`?"),  # Gymnasium's own suggestion, kept
    ("ragen/Sokoban-v7", "It provides versioned environments: [ `v0` ]."),
    ("ragen/Sokoban", "Did you mean 'ragen/Sokoban-v0'"),
    ("no_such_module_qa:ragen/Sokoban-v0", "its module 'no_such_module_qa' cannot be imported"),
])
def test_an_unknown_id_is_one_line_with_the_closest_ids(env_id, expected):
    with pytest.raises(registration.UnknownEnvId) as info:
        registration.find_spec(env_id)
    message = str(info.value)
    assert expected in message and "\n" not in message and env_id in message
    assert isinstance(info.value, ValueError) and isinstance(info.value, gym.error.Error)


def test_observes_images_of_an_unknown_id_is_a_value_error():
    """`ragen eval RUN` of a run whose env is not installed here: observes_images is its first look at the id, and
    it raised Gymnasium's NamespaceNotFound, which `ragen eval` does not catch (a traceback). A ValueError is its
    one-line `ragen eval: ...` error."""
    with pytest.raises(ValueError, match="unknown env id 'qa_nowhere/Thing-v0'"):
        observes_images("qa_nowhere/Thing-v0")


def test_entry_point_envs_run_through_the_rollout_episode(user_site):
    """End to end in a fresh process: the plugin's env id, made by ragen_core.rollout.make_envs, plays a chat
    episode whose records say what the env said."""
    code = textwrap.dedent('''
        import json
        from ragen_core.rollout import make_envs
        from ragen_core.episode import ChatEpisode
        env, = make_envs("qauser/Echo-v0", 1, {"target": "ok"})
        ep = ChatEpisode(env, length_limit=8)
        ep.reset(3)
        step = ep.step("<answer>ok</answer>")
        print(json.dumps([step.reward, step.terminated, step.action_valid, ep.success]))
    ''')
    done = _python(code, user_site)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [1.0, True, True, True]
