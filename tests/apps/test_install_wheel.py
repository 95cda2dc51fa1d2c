"""The base install as a user gets it: build the wheel, install it into a fresh venv WITHOUT torch, and use it.

One venv for the whole module (module-scoped fixture, one xdist group: built once per `make test`). What it
costs: the wheel build (~3 s), the venv (~2 s) and the install of the base dependencies. Their wheels are kept
in a cache folder between runs (``RAGEN_WHEEL_CACHE``, default ``~/.cache/ragen2-test-wheels``): the first run
downloads them (`pip wheel`, from PyPI or the configured index), later runs install offline from the folder
(`--no-index`), which takes ~15-30 s on one core. Without network access and without a filled cache, the
module is skipped (it says so); a resolution error of the package itself fails it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("install_wheel")]

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("RAGEN_WHEEL_CACHE", Path.home() / ".cache" / "ragen2-test-wheels"))
#: What the wheel is built from (a copy, so the build writes nothing into the checkout).
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "configs", "ragen_envs", "ragen_core",
           "theory_checks")
#: Network trouble, as pip words it: a reason to skip, not a failure of the package.
OFFLINE = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
           "Max retries exceeded", "Could not fetch URL", "ConnectTimeout", "ProxyError")
HEAVY = ("torch", "transformers", "tokenizers", "rich", "matplotlib")


def _run(cmd: list[str], cwd: Path, timeout: int = 900, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, **kw)


def _pip(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], cwd=cwd)


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> dict:
    """{"wheel": Path, "python": Path, "bin": Path, "work": Path, "timings": {...}} of a torch-free install."""
    tmp = tmp_path_factory.mktemp("wheel")
    timings: dict[str, float] = {}
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)

    t = time.perf_counter()
    # The project's own setuptools (>= 77, as pyproject.toml asks) builds it, without an isolated build env.
    build = _pip("wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(src), cwd=tmp)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    timings["build_s"] = time.perf_counter() - t
    wheel = next((tmp / "dist").glob("ragen2-*.whl"))

    t = time.perf_counter()
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    timings["venv_s"] = time.perf_counter() - t

    t = time.perf_counter()
    # pip of this interpreter installs into the new venv (`--python`): no pip inside it, nothing compiled.
    install = ["--python", str(python), "install", "--no-compile", "--quiet"]
    offline = _pip(*install, "--no-index", "--find-links", str(CACHE), str(wheel), cwd=tmp)
    if offline.returncode != 0:  # first run, or new dependencies: fill the cache, then install from it
        CACHE.mkdir(parents=True, exist_ok=True)
        # `pip wheel` (not download): a dependency published only as an sdist is built once, into the cache.
        dl = _pip("wheel", "--quiet", "-w", str(CACHE), str(wheel), cwd=tmp)
        if dl.returncode != 0:
            if any(word in dl.stdout + dl.stderr for word in OFFLINE):
                pytest.skip(f"no package index reachable to fetch the base dependencies: {dl.stderr[-300:]}")
            pytest.fail(f"fetching the wheel's dependencies failed:\n{dl.stdout[-2000:]}{dl.stderr[-2000:]}")
        for stale in CACHE.glob("ragen2-*.whl"):  # the cache holds the dependencies only, never the package
            stale.unlink()
        offline = _pip(*install, "--no-index", "--find-links", str(CACHE), str(wheel), cwd=tmp)
    assert offline.returncode == 0, offline.stdout[-2000:] + offline.stderr[-2000:]
    timings["install_s"] = time.perf_counter() - t
    print(f"\nwheel venv: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
    return {"wheel": wheel, "python": python, "bin": venv / "bin", "work": tmp, "timings": timings, "src": src,
            "build_log": build.stdout + build.stderr, "venv": venv}


def test_the_wheel_has_the_configs_the_license_and_torch_only_in_the_train_extra(wheel_venv):
    with zipfile.ZipFile(wheel_venv["wheel"]) as zf:
        names = set(zf.namelist())
        # Byte for byte the configs it was built from (the copy: the checkout's may be edited meanwhile).
        shipped = sorted((wheel_venv["src"] / "configs").glob("*.toml"))
        assert [c.name for c in shipped] == sorted(c.name for c in (ROOT / "configs").glob("*.toml"))
        for cfg in shipped:
            assert zf.read(f"ragen_core/_configs/{cfg.name}") == cfg.read_bytes(), cfg.name
        # The compiled decoding step's source (ragen_core/policy/native.py builds it on first use).
        assert zf.read("ragen_core/policy/csrc/decode_step.cpp") == (
            wheel_venv["src"] / "ragen_core" / "policy" / "csrc" / "decode_step.cpp").read_bytes()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = zf.read(meta_name).decode()
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in meta
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    for module in ("torch", "transformers", "matplotlib", "rich"):
        lines = [x for x in requires if x.split()[1].startswith(module)]
        assert lines and all("extra ==" in x for x in lines), (module, lines)
    assert "License classifiers are deprecated" not in wheel_venv["build_log"]
    assert "SetuptoolsDeprecationWarning" not in wheel_venv["build_log"]


def test_every_env_runs_without_torch(wheel_venv):
    code = r"""
import importlib.util, json, sys
import gymnasium as gym
import ragen_envs
assert importlib.util.find_spec("torch") is None, "torch is installed in the base venv"
played = {}
for env_id in ragen_envs.env_ids():
    env = gym.make(env_id)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs), env_id
    steps = 0
    for response in ("<think>go</think><answer>Up</answer>", "no tags at all", "<answer>1</answer>"):
        obs, reward, terminated, truncated, info = env.step(response)
        steps += 1
        assert isinstance(reward, float) and "success" in info, env_id
        if terminated or truncated:
            break
    env.close()
    played[env_id] = steps
print(json.dumps({"played": played, "heavy": sorted(m for m in HEAVY if m in sys.modules)}))
""".replace("HEAVY", repr(HEAVY))
    proc = _run([str(wheel_venv["python"]), "-c", code], cwd=wheel_venv["work"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    from ragen_envs import env_ids  # the checkout's list: the wheel must register the same ids

    assert sorted(result["played"]) == sorted(env_ids())
    assert result["heavy"] == []


def test_the_cli_without_torch(wheel_venv):
    ragen = str(wheel_venv["bin"] / "ragen")
    work = wheel_venv["work"]

    envs = _run([ragen, "envs"], cwd=work)
    assert envs.returncode == 0 and "ragen/Sokoban-v0" in envs.stdout, envs.stderr

    configs = _run([ragen, "configs"], cwd=work)
    assert configs.returncode == 0 and "bandit_tiny" in configs.stdout
    where = _run([str(wheel_venv["python"]), "-c", "from ragen_core.training.presets import presets_dir; "
                  "print(presets_dir())"], cwd=work)
    assert "_configs" in where.stdout, where.stderr  # from the wheel's package data, not a checkout
    shown = _run([ragen, "configs", "bandit_tiny"], cwd=work)
    assert shown.stdout == (wheel_venv["src"] / "configs" / "bandit_tiny.toml").read_text()

    version = _run([ragen, "--version"], cwd=work)
    assert version.returncode == 0 and version.stdout.strip().startswith("ragen2 ")

    play = _run([ragen, "play", "ragen/Bandit-v0", "--seed", "0"], cwd=work, input="?\nq\n")
    assert play.returncode == 0 and "commands: q quits, r restarts this level" in play.stdout, play.stderr

    sample = ROOT / "examples" / "rollouts_sample.jsonl"
    diag = _run([ragen, "diagnose", str(sample)], cwd=work)
    assert diag.returncode == 0 and "RV heterogeneity" in diag.stdout, diag.stderr

    for args in (["train", "bandit_tiny"], ["reproduce", "--quick"], ["verify", "--quick"],
                 ["diagnose", str(sample), "--model", str(work)]):
        proc = _run([ragen, *args], cwd=work)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "pip install 'ragen2[train]'" in proc.stderr and "Traceback" not in proc.stderr, args
        assert proc.stderr.count("\n") == 1, (args, proc.stderr)


def test_the_readme_quick_start_runs_on_the_base_install(wheel_venv):
    """The README's quick-start block, as written, in the torch-free venv; the printed result is the one its
    comment states."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    proc = _run([str(wheel_venv["python"]), "-c", code], cwd=wheel_venv["work"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    stated = code.strip().splitlines()[-1].split("#", 1)[1].split(":")[0].strip()
    assert last == stated
