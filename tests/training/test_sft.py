"""Supervised warm start: scripted responses are well-formed, refer to the actual state, solve the task (oracle),
and fine-tuning on them lowers the negative log-likelihood."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch

import ragen_envs  # noqa: F401
from ragen_core.rollout import RolloutSettings, make_envs
from ragen_core.training.config import load_config
from ragen_core.training.sft import collect_sft_batch, oracle_response, random_response, sft_train, warm_start
from ragen_envs.protocol import parse_response, vocabulary_matcher


@pytest.fixture(scope="module")
def policy(make_tiny_policy):
    return make_tiny_policy("Player Box target (1, 2) Up Down Left Right")


def test_sokoban_oracle_response_refers_to_the_state():
    env = gym.make("ragen/Sokoban-v0")
    for seed in range(5):
        env.reset(seed=seed)
        u = env.unwrapped
        text = oracle_response(env)
        parsed = parse_response(text, vocabulary_matcher(u.ACTIONS), max_actions=2)
        assert parsed.format_error is None and not parsed.dropped
        assert list(parsed.actions) == u.oracle()[:2]
        r, c = u.player_position
        assert f"I am at ({r}, {c})" in parsed.think
        for tr, tc in u.target_positions:
            assert f"({tr}, {tc})" in parsed.think
        first = parsed.actions[0].lower()
        assert first in parsed.think


def test_oracle_episodes_solve_sokoban_and_frozenlake(policy):
    for env_id, kwargs in (("ragen/Sokoban-v0", {}), ("ragen/FrozenLake-v0", {"is_slippery": False})):
        envs = make_envs(env_id, 8, kwargs)
        batch = collect_sft_batch(policy, envs, list(range(500, 508)), RolloutSettings(max_turns=10))
        assert batch.format_valid.min() == 1.0
        assert batch.success.float().mean() >= 0.75, env_id  # the solver's plan fits the action budget


def test_bandit_oracle_and_random_responses():
    env = gym.make("ragen/Bandit-v0")
    rng = np.random.default_rng(0)
    picks = set()
    for seed in range(10):
        env.reset(seed=seed)
        u = env.unwrapped
        text = oracle_response(env)
        assert f"<answer> {u.oracle()[0]} </answer>" in text
        # Reasoning about this episode's two arms, in the order shown, each with its kind.
        kinds = {u.low_arm: "steady", u.high_arm: "risky"}
        a, b = u.arm_names
        assert f"<think> {a} sounds {kinds[a]}, {b} sounds {kinds[b]}. </think>" in text
        rnd = random_response(env, rng)
        _, reward, _, _, info = env.step(rnd)
        assert info["format_error"] is None
        picks.add(info["arm_kind"])
    assert picks == {"low", "high"}


def test_sft_lowers_nll(policy):
    envs = make_envs("ragen/Bandit-v0", 8)
    batch = collect_sft_batch(policy, envs, list(range(8)), RolloutSettings(max_turns=1))
    m = batch.loss_mask != 0

    def nll() -> float:
        with torch.no_grad():
            lp = policy.forward_logprobs(batch.input_ids, batch.attention_mask).logprobs
        return float(-(lp * m).sum() / m.sum())

    before = nll()
    stats = sft_train(policy, batch, epochs=6, lr=1e-2, batch_size=4, generator=torch.Generator().manual_seed(0))
    after = nll()
    assert after < before - 1.0
    assert stats["sft/loss_last"] < stats["sft/loss_first"]


def test_warm_start_from_config(policy):
    cfg = load_config(None, ["env.id=ragen/Bandit-v0", "warm_start.sft_episodes=4", "warm_start.epochs=1",
                             "warm_start.policy=random", "rollout.max_turns=1"])
    stats = warm_start(policy, cfg)
    assert stats["sft/episodes"] == 4 and stats["sft/tokens"] > 0
    with pytest.raises(ValueError, match="oracle"):
        from ragen_core.training.sft import scripted_responder

        scripted_responder("expert")


def test_plan_reasoning_names_the_real_cells_and_the_solver_move():
    env = gym.make("ragen/Sokoban-v0", max_solution_len=2, max_actions_per_turn=1)
    for seed in range(8):
        env.reset(seed=seed)
        u = env.unwrapped
        text = oracle_response(env, reasoning="plan")
        parsed = parse_response(text, vocabulary_matcher(u.ACTIONS), max_actions=1)
        assert parsed.format_error is None and parsed.actions == (u.oracle()[0],)
        r, c = (int(x) for x in u.player_position)
        assert f"Player ({r}, {c})" in parsed.think
        for br, bc in u.box_positions:
            if (br, bc) not in {tuple(t) for t in u.target_positions}:
                assert f"({int(br)}, {int(bc)})" in parsed.think
        # the first push of the plan: the player stands next to the box, on the side opposite to the push
        m = __import__("re").search(r"Push (\w+) from \((\d+), (\d+)\)", parsed.think)
        assert m is not None
        d = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}[m.group(1)]
        pushed_from = (int(m.group(2)), int(m.group(3)))
        assert (pushed_from[0] + d[0], pushed_from[1] + d[1]) in {tuple(int(x) for x in b) for b in u.box_positions}
    with pytest.raises(ValueError, match="reasoning"):
        oracle_response(env, reasoning="verbose")


def test_linear_schedule_warms_up_then_decays_to_near_zero(policy, monkeypatch):
    envs = make_envs("ragen/Sokoban-v0", 4)
    batch = collect_sft_batch(policy, envs, [0, 1, 2, 3], RolloutSettings(max_turns=1))
    seen: list[float] = []
    real_adamw = torch.optim.AdamW

    class RecordingAdamW(real_adamw):
        def step(self, closure=None):
            seen.append(self.param_groups[0]["lr"])
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "AdamW", RecordingAdamW)
    sft_train(policy, batch, epochs=10, lr=1e-3, batch_size=1, schedule="linear")
    total = len(seen)
    assert total == 40
    peak = max(seen)
    assert seen[0] < peak and abs(peak - 1e-3) < 1e-12  # warm-up reaches the base rate
    after = seen[seen.index(peak):]
    assert all(b <= a for a, b in zip(after, after[1:]))  # then never increases
    assert seen[-1] <= 1e-3 / (total - total // 20) + 1e-12  # ends at the last step of the linear decay
    seen.clear()
    sft_train(policy, batch, epochs=1, lr=1e-3, batch_size=2, schedule="constant")
    assert seen == [1e-3, 1e-3]
    with pytest.raises(ValueError, match="schedule"):
        sft_train(policy, batch, schedule="cosine")


def test_noisy_demonstrator_keeps_the_oracle_reasoning_and_replaces_answers():
    from ragen_core.training.sft import _oracle_parts

    env = gym.make("ragen/Sokoban-v0", max_solution_len=2, max_actions_per_turn=1, obs_format="coord")
    rng = np.random.default_rng(0)
    habits, n = 0, 400
    for seed in range(n):
        env.reset(seed=seed)
        reasoning, acts = _oracle_parts(env, "plan")
        text = oracle_response(env, "plan", noise=0.6, noise_action="first", rng=rng)
        assert text.startswith(f"<think> {reasoning} </think>")  # the reasoning is always the oracle's
        answer = text.split("<answer>")[1].split("</answer>")[0].strip()
        assert answer in (acts[0], "Up")
        habits += answer == "Up" and acts[0] != "Up"
    # The habit replaces a non-"Up" oracle answer with probability 0.6 (4 sigma band over ~300 such levels).
    non_up = sum(1 for seed in range(n) if (env.reset(seed=seed), _oracle_parts(env, "plan")[1][0])[1] != "Up")
    p = habits / non_up
    assert abs(p - 0.6) < 4 * (0.24 / non_up) ** 0.5, p
    with pytest.raises(ValueError, match="noise"):
        oracle_response(env, "plan", noise=1.5)
    with pytest.raises(ValueError, match="noise_action"):
        oracle_response(env, "plan", noise=0.5, noise_action="last")


def test_bandit_habit_is_the_first_arm_shown():
    env = gym.make("ragen/Bandit-v0")
    rng = np.random.default_rng(1)
    for seed in range(20):
        env.reset(seed=seed)
        text = oracle_response(env, noise=1.0, noise_action="first", rng=rng)
        assert f"<answer> {env.unwrapped.arm_names[0]} </answer>" in text


def test_countdown_oracle_reasoning_is_true_arithmetic_and_the_habit_is_the_sum():
    from fractions import Fraction

    env = gym.make("ragen/Countdown-v0", num_count=3, num_range=(1, 5), target_range=(1, 30))
    rng = np.random.default_rng(2)
    for seed in range(60):
        env.reset(seed=seed)
        u = env.unwrapped
        text = oracle_response(env)
        steps = text.split("<think>")[1].split("</think>")[0].strip().rstrip(".").split(", ")
        assert len(steps) == 2  # three numbers: two operations
        for step in steps:
            lhs, rhs = step.split(" = ")
            a, op, b = lhs.split(" ")
            a, b, v = Fraction(a), Fraction(b), Fraction(rhs)
            assert {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[op] == v, step
        assert Fraction(steps[-1].split(" = ")[1]) == u.target
        _, reward, _, _, info = env.step(text)
        assert reward == 1.0 and info["success"]
        env.reset(seed=seed)
        habit = oracle_response(env, noise=1.0, noise_action="first", rng=rng)
        assert f"<answer> {' + '.join(str(x) for x in u.nums)} </answer>" in habit
        rnd = oracle_response(env, noise=1.0, noise_action="random", rng=rng)
        _, reward, _, _, info = env.step(rnd)
        assert info["format_error"] is None and reward in (0.1, 1.0)  # uses every number exactly once


def test_graded_reasoning_dependence_mixes_state_reasoning_with_one_fixed_template():
    from ragen_core.training.sft import template_reasoning

    kwargs = {"max_solution_len": 2, "max_actions_per_turn": 1, "obs_format": "coord"}
    template = template_reasoning("ragen/Sokoban-v0", kwargs, "plan", seed=776)
    assert template == template_reasoning("ragen/Sokoban-v0", kwargs, "plan", seed=776)  # one fixed text
    env = gym.make("ragen/Sokoban-v0", **kwargs)
    rng = np.random.default_rng(0)
    n, templated, right_answer = 400, 0, 0
    for seed in range(n):
        env.reset(seed=seed)
        oracle = oracle_response(env, "plan")
        got = oracle_response(env, "plan", rng=rng, dependence=0.3, template=template)
        reasoning = got.split("</think>")[0].removeprefix("<think>").strip()
        if reasoning == template and oracle.split("</think>")[0].removeprefix("<think>").strip() != template:
            templated += 1
        right_answer += got.split("<answer>")[1] == oracle.split("<answer>")[1]  # the answer stays the oracle's
    assert right_answer == n
    # P(template) = 0.7: 400 draws put the count within 0.7 * 400 +- 4 sd (sd = 9.2)
    assert abs(templated - 0.7 * n) < 4 * (n * 0.7 * 0.3) ** 0.5
    # q = 1 draws nothing from the generator: warm starts configured before the knob replay exactly
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    env.reset(seed=1)
    oracle_response(env, "plan", noise=0.5, noise_action="first", rng=a)
    oracle_response(env, "plan", noise=0.5, noise_action="first", rng=b, dependence=1.0, template=template)
    assert a.random() == b.random()
    with pytest.raises(ValueError, match="template"):
        oracle_response(env, "plan", rng=rng, dependence=0.5)
    with pytest.raises(ValueError, match="dependence"):
        oracle_response(env, "plan", rng=rng, dependence=1.5, template=template)


def test_an_env_with_oracle_step_writes_its_own_demonstration():
    """The demonstrator hook: `oracle_step(reasoning)`'s reasoning and action(s) are what the demonstration says,
    and the default noise answers come from the env's `ACTIONS` (the first one for the "first" habit)."""
    from ragen_envs.base import TextAgentEnv

    class Hooked(TextAgentEnv):
        ACTIONS = ("Left", "Right")

        def oracle_step(self, reasoning="full"):
            return f"the light is red ({reasoning})", ["Right"]

    text = oracle_response(Hooked())
    assert text == "<think> the light is red (full) </think> <answer> Right </answer>"
    assert oracle_response(Hooked(), "plan") == "<think> the light is red (plan) </think> <answer> Right </answer>"
    noisy = oracle_response(Hooked(), noise=1.0, noise_action="first", rng=np.random.default_rng(0))
    assert noisy == "<think> the light is red (full) </think> <answer> Left </answer>"


def test_a_template_that_pays_keeps_the_noise_off_the_template_answers():
    """template_answer="oracle": after the template the answer is always the oracle's; after state-derived
    reasoning it is the habit with probability `noise` (counted against the binomial spread)."""
    from ragen_core.training.sft import template_reasoning

    kwargs = {"max_solution_len": 2, "max_actions_per_turn": 1, "obs_format": "coord"}
    template = template_reasoning("ragen/Sokoban-v0", kwargs, "plan", seed=776)
    env = gym.make("ragen/Sokoban-v0", **kwargs)
    rng = np.random.default_rng(1)
    counts = {"template": [0, 0], "state": [0, 0]}  # [episodes, answers that differ from the oracle's]
    up_levels = 0  # levels whose oracle move is the habit itself (Up): noise cannot change those answers
    for seed in range(600):
        env.reset(seed=seed)
        oracle = oracle_response(env, "plan")
        up_levels += oracle.endswith("<answer> Up </answer>")
        if oracle.split("</think>")[0].strip() == f"<think> {template}":
            continue  # the reference level itself: its state reasoning equals the template
        got = oracle_response(env, "plan", noise=0.6, noise_action="first", rng=rng, dependence=0.5,
                              template=template, template_answer="oracle")
        branch = "template" if f"<think> {template} </think>" in got else "state"
        counts[branch][0] += 1
        counts[branch][1] += got.split("<answer>")[1] != oracle.split("<answer>")[1]
    assert counts["template"][1] == 0 and counts["template"][0] > 200
    n, wrong = counts["state"]
    expected = 0.6 * (1 - up_levels / 600)  # the habit (Up) differs from the oracle's move unless that is Up
    assert abs(wrong / n - expected) < 4 * (expected * (1 - expected) / n) ** 0.5
    with pytest.raises(ValueError, match="template_answer"):
        oracle_response(env, "plan", rng=rng, dependence=0.5, template=template, template_answer="habit")


def test_filler_words_are_drawn_independently_of_the_state():
    """filler_words = k: every reasoning opens with k words of FILLER_WORDS, uniform (chi-square-free check:
    each word's count within 4 sd of n k / 8) and with the same distribution on every level."""
    from ragen_core.training.sft import FILLER_WORDS

    env = gym.make("ragen/Sokoban-v0", max_solution_len=2, max_actions_per_turn=1, obs_format="coord")
    rng = np.random.default_rng(2)
    per_level = []
    for seed in (0, 1):
        env.reset(seed=seed)
        counts = dict.fromkeys(FILLER_WORDS, 0)
        for _ in range(400):
            words = oracle_response(env, "plan", rng=rng, filler_words=3).split()[1:4]
            for w in words:
                counts[w] += 1
        per_level.append(counts)
        n = 400 * 3
        p = 1 / len(FILLER_WORDS)
        assert all(abs(c - n * p) < 4 * (n * p * (1 - p)) ** 0.5 for c in counts.values()), counts
    # the rest of the text is the oracle's, unchanged
    env.reset(seed=0)
    text = oracle_response(env, "plan", rng=rng, filler_words=2)
    assert text.split(maxsplit=3)[3] == oracle_response(env, "plan").split(maxsplit=1)[1]
    with pytest.raises(ValueError, match="filler_words"):
        oracle_response(env, "plan", rng=rng, filler_words=-1)


def test_warm_start_knobs_are_checked_by_the_config():
    from ragen_core.training.config import ConfigError, TrainConfig

    cfg = TrainConfig()
    cfg.warm_start.template_answer = "habit"
    with pytest.raises(ConfigError, match="template_answer"):
        cfg.validate()
    cfg = TrainConfig()
    cfg.warm_start.filler_words = -2
    with pytest.raises(ConfigError, match="filler_words"):
        cfg.validate()


def test_several_templates_are_drawn_uniformly_and_one_template_draws_nothing():
    from ragen_core.training.sft import template_reasoning

    kwargs = {"max_solution_len": 2, "max_actions_per_turn": 1, "obs_format": "coord"}
    pool = [template_reasoning("ragen/Sokoban-v0", kwargs, "plan", seed=s) for s in (770, 771, 772, 773)]
    assert len(set(pool)) == 4
    env = gym.make("ragen/Sokoban-v0", **kwargs)
    env.reset(seed=5)
    rng = np.random.default_rng(3)
    counts = dict.fromkeys(pool, 0)
    n = 800
    for _ in range(n):
        reasoning = oracle_response(env, "plan", rng=rng, dependence=0.0, template=pool)
        counts[reasoning.split("</think>")[0].removeprefix("<think>").strip()] += 1
    assert all(abs(c - n / 4) < 4 * (n * 0.25 * 0.75) ** 0.5 for c in counts.values()), counts
    # a one-element pool behaves as the single template (no extra draw)
    a, b = np.random.default_rng(9), np.random.default_rng(9)
    assert oracle_response(env, "plan", rng=a, dependence=0.5, template=pool[0]) == oracle_response(
        env, "plan", rng=b, dependence=0.5, template=[pool[0]])
    assert a.random() == b.random()


def _sudoku_open_choices(board: list[int], n: int = 4) -> dict[int, list[int]]:
    """Empty cells of a Sudoku board with the digits their row, column and box lack (plain loops)."""
    b = int(n**0.5)
    out = {}
    for i, v in enumerate(board):
        if v:
            continue
        r, c = divmod(i, n)
        seen = {board[r * n + k] for k in range(n)} | {board[k * n + c] for k in range(n)}
        seen |= {board[(r - r % b + x) * n + c - c % b + y] for x in range(b) for y in range(b)}
        digits = [d for d in range(1, n + 1) if d not in seen]
        if digits:
            out[i] = digits
    return out


@pytest.mark.parametrize("noise", [0.3, 0.8])
def test_sudoku_noisy_demonstrator_replaces_answers_at_the_asked_rate(noise):
    """Sudoku has no ACTIONS list: noisy answers come from its random_action hook, a random placement the rules
    allow. The answer differs from the oracle's when the noise fires (probability `noise`) and the random
    placement is not the oracle's (probability 1 - 1 / (open cells x digits of the oracle's cell), computed
    here from the board); the count of differing answers is checked against that binomial mean."""
    from ragen_core.training.sft import _oracle_parts

    env = gym.make("ragen/Sudoku-v0", size=4, difficulty="hard", max_actions_per_turn=1)
    rng = np.random.default_rng(11)
    levels, differ, mean, var, answers = 300, 0, 0.0, 0.0, set()
    for seed in range(levels):
        env.reset(seed=seed)
        u = env.unwrapped
        reasoning, acts = _oracle_parts(env, "full")
        text = oracle_response(env, noise=noise, noise_action="random", rng=rng)
        assert text.startswith(f"<think> {reasoning} </think>")  # the reasoning stays the oracle's
        answer = text.split("<answer>")[1].split("</answer>")[0].strip()
        choices = _sudoku_open_choices(list(u.board))
        cell = int(acts[0][1]) * 4 + int(acts[0][3]) - 5  # "R<r>C<c>=<d>", 4x4: one digit each
        p = noise * (1 - 1 / (len(choices) * len(choices[cell])))
        mean, var = mean + p, var + p * (1 - p)
        differ += answer != acts[0]
        answers.add(answer)
        _, _, _, _, info = env.step(text)  # every answer, noisy or not, is a placement the env accepts
        assert info["action_is_valid"] and not info["refused"], text
    assert abs(differ - mean) < 4 * var**0.5, (differ, mean, var**0.5)
    assert len(answers) > 30  # spread over many placements, not one habit


def test_sudoku_random_policy_and_noisy_warm_start_run(policy):
    env = gym.make("ragen/Sudoku-v0", size=4)
    rng = np.random.default_rng(0)
    for seed in range(20):
        env.reset(seed=seed)
        _, _, _, _, info = env.step(random_response(env, rng))
        assert info["format_error"] is None and info["action_is_valid"] and not info["refused"]
    base = ["env.id=ragen/Sudoku-v0", "warm_start.sft_episodes=4", "warm_start.epochs=1", "rollout.max_turns=1"]
    for extra in (["warm_start.policy=random"], ["warm_start.action_noise=0.5", "warm_start.noise_action=random"]):
        stats = warm_start(policy, load_config(None, base + extra))
        assert stats["sft/episodes"] == 4 and stats["sft/tokens"] > 0, extra


def test_sudokus_habit_is_a_refused_placement_on_the_oracles_cell():
    """Sudoku's habit (`noise_action = "first"`): the oracle's cell with a digit its row, column or box already holds
    (the smallest), whatever the generator draws; the env refuses it (-0.1, the board unchanged), so an episode of
    habits goes on to its turn limit. Checked on every state of oracle-played episodes against the board itself."""
    env = gym.make("ragen/Sudoku-v0", size=4, givens=8, max_actions_per_turn=1)
    checked = 0
    for seed in range(30):
        env.reset(seed=seed)
        u = env.unwrapped
        while True:
            oracle = u.oracle_step()[1][0]
            text = oracle_response(env, noise=1.0, noise_action="first", rng=np.random.default_rng(seed))
            other = oracle_response(env, noise=1.0, noise_action="first", rng=np.random.default_rng(seed + 99))
            habit = re.search(r"<answer> (.*) </answer>", text).group(1)
            assert other == text  # a habit: the state decides, not the draw
            r, c, d = (int(x) for x in re.fullmatch(r"R(\d)C(\d)=(\d)", habit).groups())
            assert oracle.startswith(f"R{r}C{c}=")
            row, col = u.board[(r - 1) * 4: r * 4], u.board[c - 1::4]
            box = [u.board[i] for i in range(16) if (i // 4) // 2 == (r - 1) // 2 and (i % 4) // 2 == (c - 1) // 2]
            seen = sorted({x for x in row + col + box if x} - {u.board[(r - 1) * 4 + c - 1]})
            assert d == seen[0], (habit, seen)
            board = list(u.board)
            _, reward, _, _, info = env.step(text)
            assert info["refused"] and u.board == board and reward == pytest.approx(-0.1), info
            checked += 1
            *_, term, trunc, _ = env.step(f"<think> x </think> <answer> {oracle} </answer>")
            if term or trunc:
                break
    assert checked >= 100
