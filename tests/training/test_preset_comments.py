"""The header comments of the shipped configs (``configs/*.toml``) say what the loaded config is.

Each shipped config opens with comments: a one-line description (what `ragen configs` lists), the command that
trains it, what differs from the config it derives from, its key values and its measured results. They are typed
by hand and had drifted from the values (a "what differs" list naming a key that does not differ, the steps of a
measured run) and from the records (a config's untuned seeds said "not run yet" after docs/collapse.md had
reported them). The claims checked here are the ones that can be read mechanically:

- the first comment line is one complete sentence, and every preset name resolves;
- every command ``ragen train configs/NAME.toml key=value ...`` names its own file and loads with its overrides;
- every statement ``key = value`` (spaces around ``=``; ``key=value`` is an override, a variant the text talks
  about) names an existing key and gives the loaded config's value;
- "N groups x G rollouts", "N groups of G a step", "E episodes x K epochs", "sft_episodes = E (x K epochs)",
  "x S samples, at step 0 and every K steps", "mini-batches of M rows", "K epochs at lr L", "N% of its answers",
  "GRPO, lr L [annealed linearly]", "actor lr / critic lr / entropy / KL off / clip a / b / up to T turns";
- a "What differs from OTHER" block names every key whose loaded value differs from OTHER's (but run.name), and
  every ``section.key = value`` in it is a real difference;
- the results quoted from ``benchmarks/results/learning.json`` (per-seed success after the warm start and after
  RL, the RL steps, the mean gain and its 95% t interval) are that file's, recomputed here from its per-run values.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from ragen_core.training.config import config_to_dict, load_config
from ragen_core.training.presets import describe, list_presets, resolve_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
NAMES = [p.stem for p in CONFIGS]
#: Two-sided 95% Student t quantile at 2 degrees of freedom (3 seeds).
T975_2 = 4.302652729911275
_NUM = r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
#: Where a config's measured results come from: config -> learning.json summary keys its header quotes.
LEARNING = {
    "bandit_tiny": ["bandit"], "sokoban_tiny": ["sokoban"], "frozenlake_tiny": ["frozenlake"],
    "countdown_tiny": ["countdown"], "searchqa_tiny": ["searchqa"], "webshop_tiny": ["webshop"],
    "sudoku_tiny": ["sudoku"], "game2048_tiny": ["game2048"], "math_tiny": ["math"], "code_tiny": ["code"],
    "sokoban_vision_tiny": ["sokoban_vision", "sokoban_vision_image"],
}


def header_lines(path: Path) -> list[str]:
    """The comment lines before the first table, without their ``#`` (continuation indents kept)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        out.append(line[1:].removeprefix(" "))
    return out


def header(path: Path) -> str:
    """The header as one line of text (whitespace runs as one space)."""
    return " ".join(" ".join(header_lines(path)).split())


def flat(cfg: Any) -> dict[str, Any]:
    """``{"section.key": value}`` of a loaded config; env.kwargs entries as ``env.kwargs.KEY``."""
    out = {}
    for section, values in config_to_dict(cfg).items():
        for key, value in values.items():
            if section == "env" and key == "kwargs":
                out.update({f"env.kwargs.{k}": v for k, v in value.items()})
            else:
                out[f"{section}.{key}"] = value
    return out


def same(text: str, value: Any) -> bool:
    """Does the literal `text` of a comment (a TOML scalar) say `value`?"""
    if isinstance(value, bool):
        return text == str(value).lower()
    if isinstance(value, (int, float)):
        try:
            return float(text) == float(value)
        except ValueError:
            return False
    return text.strip('"') == str(value)


def lookup(values: dict[str, Any], key: str) -> list[str]:
    """The full keys a comment's `key` may mean: itself when dotted, else the env kwarg of that name, else every
    section's key of that name."""
    if "." in key:
        return [key] if key in values else []
    if f"env.kwargs.{key}" in values:
        return [f"env.kwargs.{key}"]
    return [k for k in values if k.rsplit(".", 1)[-1] == key and not k.startswith("env.kwargs.")]


_STATEMENT = re.compile(r'(?<![\w.`=])((?:[a-z_]+\.)*[a-z_]+) = ("[^"]*"|true|false|' + _NUM + r")(?![\w.-])")


def no_brackets(text: str) -> str:
    """`text` without its ``[...]`` asides (the paper's or the env's values, not the config's)."""
    return re.sub(r"\[[^\]]*\]", " ", text)


# ------------------------------------------------------------------------------------------------------ listing


def test_every_preset_resolves_and_has_a_one_sentence_description():
    assert NAMES and [name for name, _, _ in list_presets()] == NAMES
    for name, path, text in list_presets():
        assert resolve_config(name) == (path, "")
        assert text == describe(path) == header_lines(path)[0].strip()
        # One line that reads on its own in `ragen configs`: a sentence, not the start of one.
        assert text.endswith(".") and len(text) <= 120, f"{name}: first comment line {text!r}"


@pytest.mark.parametrize("path", CONFIGS, ids=NAMES)
def test_the_commands_in_the_header_name_the_file_and_load(path):
    commands = [line.split("ragen train ", 1)[1] for line in header_lines(path) if "ragen train " in line]
    assert commands, f"{path.name}: no `ragen train` line"
    for command in commands:
        words = command.split("(")[0].split()
        assert words[0] in (f"configs/{path.name}", path.stem), f"{path.name}: the command trains {words[0]}"
        overrides = [w.replace("=S", "=0") for w in words[1:] if "=" in w]  # run.seed=S: any seed
        load_config(path, overrides)


# ------------------------------------------------------------------------------------------------ stated values


@pytest.mark.parametrize("path", CONFIGS, ids=NAMES)
def test_key_value_statements_give_the_loaded_value(path):
    values = flat(load_config(path))
    for key, literal in _STATEMENT.findall(header(path)):
        keys = lookup(values, key)
        if "." in key:
            assert keys, f"{path.name}: `{key} = {literal}` names no config key"
        if not keys:
            continue  # a word of the prose ("gamma = lambda = 1"): not a config key
        assert any(same(literal, values[k]) for k in keys), \
            f"{path.name}: the header says {key} = {literal}; the config has {[values[k] for k in keys]}"


def _patterns(v: dict[str, Any]) -> list[tuple[str, Any]]:
    """(regex, check(match) -> expected and actual) for the phrasings of sizes, rates and shares."""
    def pair(*keys: str, scale: float = 1.0):
        return lambda m: ([float(x) for x in m.groups()], [float(v[k]) * scale for k in keys])

    schedule = {"annealed linearly": "linear", "constant": "constant"}
    return [
        (r"(\d+) groups x (\d+) rollouts", pair("rollout.groups", "rollout.group_size")),
        (r"(\d+) groups of (\d+) a step", pair("rollout.groups", "rollout.group_size")),
        (r"(\d+) episodes x (\d+) epochs", pair("warm_start.sft_episodes", "warm_start.epochs")),
        (r"sft_episodes = (\d+) \(x (\d+) epochs\)", pair("warm_start.sft_episodes", "warm_start.epochs")),
        (r"x (\d+) samples(?:,| \(mi\.probe_group_size[^)]*\),) (?:cross-scored )?at step 0 and every (\d+) steps",
         pair("mi.probe_group_size", "mi.probe_every")),
        (r"mini-batches of (\d+) rows", pair("algo.mini_batch_size")),
        (r"(\d+) (?:warm-start )?epochs at (?:lr )?(" + _NUM + ")", pair("warm_start.epochs", "warm_start.lr")),
        (r"(\d+)% of (?:its|the) answers", pair("warm_start.action_noise", scale=100.0)),
        (r"\b(?:GRPO|PPO)(?:,| with| at a constant) lr (" + _NUM + ")", pair("algo.lr")),
        (r"\b(GRPO|PPO)(?:,| with| at a constant) lr",
         lambda m: (m.group(1).lower(), v["algo.name"])),
        (r"lr " + _NUM + " (annealed linearly)|(constant) lr " + _NUM,
         lambda m: (schedule[m.group(1) or m.group(2)], v["algo.lr_schedule"])),
        (r"actor lr (" + _NUM + ")", pair("algo.lr")),
        (r"critic lr (" + _NUM + ")", pair("model.critic_lr")),
        (r"\bentropy(?: bonus)? (" + _NUM + ")", pair("algo.entropy_coef")),
        (r"\bKL off\b", lambda m: (0.0, v["algo.kl_coef"])),
        (r"\bclip (" + _NUM + ") / (" + _NUM + ")", pair("algo.clip_low", "algo.clip_high")),
        (r"up to (\d+) turns", pair("rollout.max_turns")),
        (r"top-p filtering rho = (" + _NUM + ")", pair("filter.value")),
    ]


@pytest.mark.parametrize("path", CONFIGS, ids=NAMES)
def test_sizes_rates_and_shares_in_the_prose_are_the_config_s(path):
    values = flat(load_config(path))
    text = no_brackets(header(path))
    for pattern, check in _patterns(values):
        for match in re.finditer(pattern, text, flags=re.I):
            said, actual = check(match)
            assert said == actual, f"{path.name}: {match.group(0)!r} says {said}; the config has {actual}"


def test_the_phrasings_are_found():
    # Each pattern above matches some header, and most configs state values as `key = value`: a reworded header
    # must not turn a check off unnoticed.
    texts = [(no_brackets(header(p)), flat(load_config(p))) for p in CONFIGS]
    stating = [p.stem for p, (_, v) in zip(CONFIGS, texts)
               if any(lookup(v, key) for key, _ in _STATEMENT.findall(header(p)))]
    assert len(stating) >= 15, stating
    for i, (pattern, _) in enumerate(_patterns(texts[0][1])):
        assert any(re.search(pattern, t, flags=re.I) for t, _ in texts), f"pattern {i} ({pattern}) matches nothing"


# ------------------------------------------------------------------------------------------------ what differs


def differs_blocks(path: Path) -> list[tuple[str, str]]:
    """``(OTHER, block text)`` for each "What differs from OTHER" paragraph (up to the next empty comment line)."""
    lines, out = header_lines(path), []
    for i, line in enumerate(lines):
        m = re.search(r"What differs from (\w+)", line)
        if m:
            end = next((j for j in range(i + 1, len(lines)) if not lines[j].strip()), len(lines))
            out.append((m.group(1), " ".join(" ".join(lines[i:end]).split())))
    return out


def test_configs_that_derive_from_another_say_so():
    derived = {p.stem for p in CONFIGS if differs_blocks(p)}
    assert {"collapse_sokoban", "collapse_frozenlake", "mechanism_sokoban", "mechanism_frozenlake",
            "sokoban_vision_tiny"} <= derived


@pytest.mark.parametrize("path", [p for p in CONFIGS if differs_blocks(p)], ids=lambda p: p.stem)
def test_what_differs_names_every_difference_and_only_differences(path):
    mine = flat(load_config(path))
    for other, block in differs_blocks(path):
        theirs = flat(load_config(ROOT / "configs" / f"{other}.toml"))
        diff = {k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)} - {"run.name"}
        for key in sorted(diff):
            leaf = key.rsplit(".", 1)[-1]
            assert key in block or re.search(rf"(?<![\w.]){leaf} = ", block), \
                f"{path.name}: differs from {other} in {key} ({theirs.get(key)!r} -> {mine.get(key)!r}), not said"
        for key, literal in _STATEMENT.findall(block):
            if "." in key and not key.startswith("env.kwargs."):
                assert key in diff, f"{path.name}: `{key} = {literal}` is listed as a difference from {other}"


# ---------------------------------------------------------------------------------------------- measured results


def pct(x: float) -> str:
    """A success rate as the headers write it: one decimal, a trailing .0 dropped (100, 93.8, 0)."""
    s = f"{100 * x:.1f}"
    return s[:-2] if s.endswith(".0") else s


def signed(x: float) -> str:
    s = f"{x:+.1f}"
    return s[:-2] if s.endswith(".0") else s


def normalise(text: str) -> str:
    """Drop a trailing ``.0`` of every number, as :func:`pct` does (so "0.0/1.6/0.0%" reads "0/1.6/0%")."""
    return re.sub(r"(\d)\.0(?!\d)", r"\1", text)


def learning_runs() -> dict[str, list[dict[str, Any]]]:
    data = json.loads((ROOT / "benchmarks" / "results" / "learning.json").read_text(encoding="utf-8"))
    runs: dict[str, list[dict[str, Any]]] = {}
    for run in data["runs"]:
        if run["variant"] == "top_p":
            runs.setdefault(run["config"], []).append(run)
    return {k: sorted(v, key=lambda r: r["seed"]) for k, v in runs.items()}


@pytest.mark.parametrize("name", sorted(LEARNING))
def test_quoted_learning_results_are_the_record_s(name):
    text = normalise(header(ROOT / "configs" / f"{name}.toml"))
    runs = learning_runs()
    for key in LEARNING[name]:
        seeds = runs[key]
        assert len(seeds) == 3
        before = [pct(r["before"]) for r in seeds]
        after = [pct(r["after"]) for r in seeds]
        gains = [100 * (r["after"] - r["before"]) for r in seeds]  # a plain mean and t interval, not the summary's
        mean, half = statistics.fmean(gains), T975_2 * statistics.stdev(gains) / 3 ** 0.5
        wrote_before = "/".join(before) + "%" in text or (len(set(before)) == 1 and f"{before[0]}%" in text)
        assert wrote_before, f"{name}: {key}'s success after the warm start {before} is not quoted"
        m = re.search(re.escape("/".join(after)) + r"% after (?:([\d/]+) )?RL steps", text) \
            or re.search(re.escape("/".join(after)) + "%", text)
        assert m, f"{name}: {key}'s success after RL {after} is not quoted"
        if m.lastindex and m.group(1):
            steps = [str(r["steps"]) for r in seeds]
            said = m.group(1).split("/")
            assert said == steps or said == [steps[0]] * (len(said) == 1 and len(set(steps)) == 1), \
                f"{name}: {key} ran {'/'.join(steps)} RL steps; the header says {m.group(1)}"
        gain = rf"{re.escape(signed(mean))} (?:points )?\[{re.escape(signed(mean - half))}, " \
               rf"{re.escape(signed(mean + half))}\]"
        assert re.search(gain, text), f"{name}: {key}'s gain {signed(mean)} [{signed(mean - half)}, " \
                                      f"{signed(mean + half)}] is not quoted"


def countdown_problems(num_count: int, low: int, high: int, target_low: int, target_high: int) -> int:
    """How many (numbers in the order shown, target) pairs have an answer using every number once with + - * /:
    a plain enumeration of every value the numbers make (exact fractions), independent of the env's solver."""
    from fractions import Fraction
    from itertools import product

    def values(nums: tuple[Fraction, ...]) -> set[Fraction]:
        if len(nums) == 1:
            return {nums[0]}
        out: set[Fraction] = set()
        for i, a in enumerate(nums):
            for j, b in enumerate(nums):
                if i != j:
                    rest = tuple(x for k, x in enumerate(nums) if k not in (i, j))
                    for v in {a + b, a - b, a * b, *((a / b,) if b else ())}:
                        out |= values((*rest, v))
        return out

    count = 0
    for nums in product(range(low, high + 1), repeat=num_count):
        made = values(tuple(Fraction(x) for x in nums))
        count += sum(Fraction(t) in made for t in range(target_low, target_high + 1))
    return count


def test_countdown_problem_counts():
    # "those ranges hold 541 distinct problems" (the config's ranges) and "numbers 1-5 and targets 1-30 (N
    # problems)" (a variant the header compares with): the counts the header gives are the enumeration's.
    path = ROOT / "configs" / "countdown_tiny.toml"
    text, kw = header(path), load_config(path).env.kwargs
    shipped = re.search(r"those ranges hold (\d+) distinct problems", text)
    assert shipped and int(shipped.group(1)) == countdown_problems(kw["num_count"], *kw["num_range"],
                                                                   *kw["target_range"])
    variants = re.findall(r"numbers (\d+)-(\d+) and targets (\d+)-(\d+) \((\d+) problems\)", text)
    assert variants
    for lo, hi, t_lo, t_hi, said in variants:
        assert int(said) == countdown_problems(kw["num_count"], int(lo), int(hi), int(t_lo), int(t_hi))
