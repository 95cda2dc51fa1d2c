"""Sizes that would exhaust memory or time before any useful work are one clear error, before any folder is made and
before anything big is allocated (ragen_core.limits): episodes per batch (config keys, `ragen eval --episodes` x
`--group-size`, `rollout()`), turns per episode, warm-start filler words, new tokens beyond the model's positions
(config, `ragen eval --max-tokens`, `Policy.generate`) and `ragen reproduce --seeds`. The limits are compared with
the numbers they come from (written out here), every shipped config, preset and experiment run still loads, and a
value at each limit is still accepted."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ragen_core.apps.eval import main as eval_main
from ragen_core.apps.eval.cli import build_parser
from ragen_core.apps.eval.spec import SpecError, build_spec
from ragen_core.apps.reproduce.cli import main as reproduce_main
from ragen_core.apps.reproduce.experiments import EXPERIMENTS
from ragen_core.apps.reproduce.spec import build_runs, choose_seeds
from ragen_core.limits import model_positions, path_positions
from ragen_core.policy.base import Generation, Policy
from ragen_core.rollout import RolloutSettings, rollout
from ragen_core.training.config import ConfigError, load_config
from ragen_core.training.presets import list_presets

ROOT = Path(__file__).resolve().parents[2]
#: The limits as the code states them (written out: the tests compare against the numbers, not the constants).
BATCH, TURNS, FILLER, TINY = 65535, 10_000, 5461, 4096


# ---------------------------------------------------------------------------------------------- where limits come from
def test_the_limits_are_the_numbers_they_come_from():
    from ragen_core.policy import TINY_PATHS, build_tiny_model
    from ragen_core.training.sft import FILLER_WORDS
    from ragen_envs.base import UNBUDGETED_MAX_TURNS
    from ragen_envs.spaces import MAX_RESPONSE_CHARS

    assert BATCH == 2**16 - 1  # the CUDA grid's y/z limit that torch's attention kernels put the batch on
    assert TURNS == UNBUDGETED_MAX_TURNS
    # Each filler word takes its letters and a space: FILLER words fit the characters the envs read, one more not.
    shortest = min(len(w) for w in FILLER_WORDS) + 1
    assert shortest == 3 and FILLER * shortest <= MAX_RESPONSE_CHARS < (FILLER + 1) * shortest
    assert set(TINY_PATHS) == {"tiny", "tiny-vision", "tiny-base"}
    assert all(path_positions(name) == TINY for name in TINY_PATHS)
    assert inspect.signature(build_tiny_model).parameters["max_positions"].default == TINY


def test_a_models_positions_are_read_from_its_config(tmp_path):
    assert model_positions({"max_position_embeddings": 32768}) == 32768
    assert model_positions(SimpleNamespace(max_position_embeddings=2048)) == 2048
    assert model_positions({"n_positions": 1024}) == 1024  # GPT-2's name
    assert model_positions({"text_config": {"max_position_embeddings": 512}}) == 512  # a vision-language model
    # A rope scaling stretches the context: Qwen2.5's YaRN (32768 x 4), Llama 3.1's (8192 x 8 < its own 131072).
    yarn = {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}
    assert model_positions({"max_position_embeddings": 32768, "rope_scaling": yarn}) == 131072
    llama = {"factor": 8.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}
    assert model_positions({"max_position_embeddings": 131072, "rope_scaling": llama}) == 131072
    assert model_positions({"max_position_embeddings": 4096, "rope_parameters": {"rope_type": "default"}}) == 4096
    assert model_positions({}) is None and model_positions(None) is None
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"max_position_embeddings": 300}))
    assert path_positions(tmp_path / "m") == 300
    assert path_positions(tmp_path / "nowhere") is None  # nothing to read: not checked here
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    assert path_positions(tmp_path / "bad") is None


# ---------------------------------------------------------------------------------------------- the config
def _refused(overrides: list[str], key: str, *fragments: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "configs" / "sokoban_tiny.toml", overrides)
    message = str(err.value)
    assert message.startswith(key + " ") and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.mark.parametrize(("override", "key", "limit"), [
    ("eval.episodes=4000000000", "eval.episodes", BATCH),
    ("eval.episodes=65536", "eval.episodes", BATCH),
    ("rollout.groups=65536", "rollout.groups", BATCH),
    ("rollout.group_size=4000000000", "rollout.group_size", BATCH),
    ("warm_start.sft_episodes=4000000000", "warm_start.sft_episodes", BATCH),
    ("mi.probe_prompts=65536", "mi.probe_prompts", BATCH),
    ("mi.probe_group_size=65536", "mi.probe_group_size", BATCH),
    ("rollout.max_turns=1000000000", "rollout.max_turns", TURNS),
    ("rollout.max_turns=10001", "rollout.max_turns", TURNS),
    ("warm_start.filler_words=1000000000", "warm_start.filler_words", FILLER),
    ("rollout.max_new_tokens=100000000000", "rollout.max_new_tokens", TINY),
    ("rollout.max_new_tokens=4097", "rollout.max_new_tokens", TINY),
])
def test_a_count_beyond_what_the_code_can_run_is_one_config_error(override, key, limit):
    value = override.split("=")[1]
    _refused([override], key, f", {limit}]", f"got {value}")


def test_the_episodes_of_one_batch_are_counted_across_keys():
    _refused(["rollout.groups=32768", "rollout.group_size=2"], "rollout.groups",
             "rollout.group_size must be at most 65535", "32768 x 2 = 65536")
    _refused(["mi.probe_prompts=16384", "mi.probe_group_size=4"], "mi.probe_prompts",
             "mi.probe_group_size must be at most 65535", "16384 x 4 = 65536")


def test_values_at_the_limits_are_accepted():
    cfg = load_config(ROOT / "configs" / "sokoban_tiny.toml", [
        "rollout.groups=32767", "rollout.group_size=2", "eval.episodes=65535", "warm_start.sft_episodes=65535",
        "mi.probe_prompts=16383", "mi.probe_group_size=4", "rollout.max_turns=10000", "warm_start.filler_words=5461",
        "rollout.max_new_tokens=4096"])
    assert (cfg.rollout.groups * cfg.rollout.group_size, cfg.eval.episodes, cfg.rollout.max_new_tokens) == \
        (65534, 65535, 4096)


def test_new_tokens_are_checked_against_a_model_folders_own_positions(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 256}))
    base = ["model.path=" + str(model)]
    assert load_config(None, [*base, "rollout.max_new_tokens=256"]).rollout.max_new_tokens == 256
    message = _refused([*base, "rollout.max_new_tokens=257"], "rollout.max_new_tokens", "[1, 256]", "got 257")
    assert str(model) in message
    # A model that is not there yet (a GPU config's /models/... path) is checked when it is loaded (generate).
    assert load_config(None, ["model.path=/models/nowhere", "rollout.max_new_tokens=100000"])


def _shipped_configs() -> list[Path]:
    files = sorted((ROOT / "configs").glob("*.toml"))
    return files + [path for _, path, _ in list_presets()]


def test_no_shipped_config_preset_or_experiment_run_is_refused(monkeypatch):
    from ragen_core.apps.reproduce import experiments

    configs = _shipped_configs()
    assert len(configs) >= 19
    for path in configs:
        load_config(path)
    # Every run of every experiment (its config with its overrides), quick or full, on its default seeds.
    monkeypatch.setattr(experiments, "REGULARISERS_LR", {"frozenlake": 0.1, "sokoban": 0.1})
    monkeypatch.setattr(experiments, "PILOT_LR", {"frozenlake": 0.1, "sokoban": 0.1})
    seen = 0
    for exp in EXPERIMENTS.values():
        for quick in (False, True):
            for spec in build_runs(exp, choose_seeds(exp, quick=quick), ROOT / "configs", Path("/tmp/cache"),
                                   quick=quick):
                load_config(spec.config, list(spec.overrides))
                seen += 1
    assert seen > 50


# ---------------------------------------------------------------------------------------------- rollout and generate
def test_rollout_refuses_more_episodes_than_one_batch_before_touching_an_env():
    with pytest.raises(ValueError, match=r"len\(seeds\) x group_size must be at most 65535 .*got 65536 x 1"):
        rollout(None, [], list(range(65536)), 1)
    with pytest.raises(ValueError, match="must be at most 65535"):
        rollout(None, [], list(range(2)), 40000)
    with pytest.raises(ValueError, match=r"^max_turns must be at most 10000 .*got 10001$"):
        RolloutSettings(max_turns=10001)
    assert RolloutSettings(max_turns=10000).max_turns == 10000


class _Recorder(Policy):
    """A policy whose model says it has `positions` positions, and whose sampler records what it was asked."""

    def __init__(self, positions: int):
        self.model = torch.nn.Module()
        self.model.config = SimpleNamespace(max_position_embeddings=positions, vocab_size=100)
        self.tokenizer = None
        self.asked: list[int] = []

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def _sample(self, prompts, request):
        self.asked.append(request.max_new_tokens)
        return [Generation("", list(p), [], [], "length") for p in prompts]


def test_generate_refuses_more_new_tokens_than_the_model_has_positions_before_sampling():
    policy = _Recorder(8)
    for bad in (9, 10**11):
        with pytest.raises(ValueError, match=rf"^max_new_tokens must be an integer in \[1, 8\] .*got {bad}$"):
            policy.generate([[1, 2, 3]], max_new_tokens=bad)
    assert policy.asked == []  # nothing was sampled
    policy.generate([[1, 2, 3]], max_new_tokens=8)  # the prompt is not counted (module docstring of limits)
    assert policy.asked == [8]
    unknown = _Recorder(8)
    unknown.model.config = SimpleNamespace(vocab_size=100)  # a model that does not say: not checked
    unknown.generate([[1]], max_new_tokens=50)
    assert unknown.asked == [50]


def test_the_tiny_model_refuses_new_tokens_beyond_its_positions():
    from ragen_core.policy import load_policy

    policy = load_policy("tiny")
    prompt = policy.encode_chat([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match=r"^max_new_tokens must be an integer in \[1, 4096\] .*got 4097$"):
        policy.generate([prompt], max_new_tokens=4097)
    gen = torch.Generator().manual_seed(0)
    assert len(policy.generate([prompt], max_new_tokens=3, generator=gen)[0].response_ids) <= 3


# ---------------------------------------------------------------------------------------------- ragen eval
def _spec(*argv: str):
    return build_spec(build_parser().parse_args(["tiny", "--envs", "Bandit-v0", *argv]), [])


@pytest.mark.parametrize(("argv", "fragments"), [
    (["--episodes", "4000000000"], ["--episodes 4000000000 x --group-size 1 = 4000000000", "at most 65535"]),
    (["--episodes", "65536"], ["= 65536 episodes per env", "at most 65535"]),
    (["--episodes", "100", "--group-size", "1000"], ["--episodes 100 x --group-size 1000 = 100000"]),
    (["--group-size", "4000000000"], ["--group-size 4000000000"]),  # 128 seeds (the default) x G
    (["--max-tokens", "100000000000"], ["--max-tokens must be an integer in [1, 4096]", "got 100000000000"]),
    (["--max-tokens", "4097"], ["--max-tokens must be an integer in [1, 4096]", "MODEL tiny"]),
    (["--config", "bandit_tiny", "--max-tokens", "5000"], ["--max-tokens must be an integer in [1, 4096]"]),
])
def test_eval_refuses_sizes_it_cannot_run_when_it_builds_its_definition(argv, fragments):
    with pytest.raises(SpecError) as err:
        _spec(*argv)
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)


def test_eval_accepts_the_sizes_at_the_limits():
    spec = _spec("--episodes", "65535", "--max-tokens", "4096")
    assert spec.episodes == 65535 and spec.plans["ragen/Bandit-v0"]["settings"]["max_new_tokens"] == 4096
    assert _spec("--episodes", "16383", "--group-size", "4").group_size == 4


def test_eval_says_so_in_one_line_and_makes_no_folder(tmp_path, capsys):
    for argv in (["--episodes", "4000000000"], ["--max-tokens", "100000000000"]):
        out = tmp_path / "ev"
        assert eval_main(["tiny", "--envs", "Bandit-v0", *argv, "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        lines = [x for x in err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("ragen eval: --") and "Traceback" not in err, err
        assert not out.exists()


# ---------------------------------------------------------------------------------------------- ragen reproduce
def test_reproduce_runs_at_most_the_seeds_its_power_analysis_plans():
    study = EXPERIMENTS["study"]
    with pytest.raises(ValueError, match=r"^--seeds must be an integer in \[1, 1000\] .*got 1001$"):
        choose_seeds(study, 1001, 200)
    assert choose_seeds(study, 1000, 200) == list(range(200, 1200))
    from ragen_core.apps.reproduce.analysis import seeds_needed

    # The same number bounds the power analysis: a design needing more than 1000 seeds is out of reach (None).
    assert seeds_needed(0.01, 1.0) is None and seeds_needed(0.5, 1.0) == 34


def test_reproduce_says_so_in_one_line_and_makes_no_folder(tmp_path, capsys):
    out = tmp_path / "rp"
    assert reproduce_main(["--seeds", "4000000000", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"ragen reproduce: --seeds must be an integer in \[1, 1000\] .*got 4000000000\n", err), err
    assert not out.exists()
