"""The training hooks of MetaMathQA, Code, SearchQA and WebShop: `oracle_step`, `random_action`, `is_final_action`.

For each env: whole episodes played with `oracle_step()`'s actions succeed exactly where `oracle()`'s do (and take
the same actions on the oracle's path); the reasoning names what the state shows and differs between states; the
same state gives the same text; every `random_action(rng)` is accepted by the env; a noisy demonstrator's
"random" answers come from the hook, and its "first" habit is refused with a clear error (no `ACTIONS` list).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_core.training.sft import oracle_response
from ragen_envs.data import fixture_path

#: Small settings of each env (the tiny configs' and a harder one), with the seeds the tests play.
SEARCHQA_TINY = {"hops": 1, "num_entities": 12, "distractors": 1, "top_k": 2, "max_turns": 3}
SEARCHQA_HOPS = {"hops": (1, 3), "num_entities": 30, "distractors": 2, "top_k": 3, "max_turns": 5}
WEBSHOP_TINY = {"num_products": 40, "goal_attributes": (1, 1), "results_per_page": 3, "max_results": 6,
                "max_turns": 6, "categories": ("electronics › audio › headphones", "sports › outdoor › backpacks")}
WEBSHOP_PAGES = {"num_products": 200, "goal_attributes": (1, 2), "results_per_page": 2, "max_results": 10}
CODE_FAST = {"num_tests": 2, "num_public_tests": 1, "limits": {"cpu_seconds": 2, "wall_seconds": 4}}

CASES: dict[str, tuple[str, dict[str, Any], range]] = {
    "searchqa_tiny": ("ragen/SearchQA-v0", SEARCHQA_TINY, range(12)),
    "searchqa_hops": ("ragen/SearchQA-v0", SEARCHQA_HOPS, range(12)),
    "webshop_tiny": ("ragen/WebShop-v0", WEBSHOP_TINY, range(8)),
    "webshop_pages": ("ragen/WebShop-v0", WEBSHOP_PAGES, range(8)),
    "math": ("ragen/MetaMathQA-v0", {"max_turns": 2}, range(16)),
    "code": ("ragen/Code-v0", {**CODE_FAST, "families": ("reverse_words", "is_palindrome")}, range(4)),
}


def respond(reasoning: str, action: str) -> str:
    return f"<think> {reasoning} </think> <answer> {action} </answer>"


def play(env: gym.Env, seed: int, pick: Callable[[Any], str], max_steps: int = 12) -> tuple[list[str], bool]:
    """One whole episode from `seed`, each action `pick(unwrapped env)`: (the actions, success)."""
    env.reset(seed=seed)
    actions, info = [], {}
    for _ in range(max_steps):
        a = pick(env.unwrapped)
        actions.append(a)
        *_, term, trunc, info = env.step(respond("x", a))
        if term or trunc:
            break
    return actions, bool(info.get("success"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_oracle_step_plays_the_oracles_episodes(case):
    """Episode by episode, oracle_step() takes oracle()'s actions and succeeds where it does (here: always)."""
    env_id, kwargs, seeds = CASES[case]
    env = gym.make(env_id, **kwargs)
    for seed in seeds:
        by_step, won_step = play(env, seed, lambda u: u.oracle_step()[1][0])
        by_oracle, won_oracle = play(env, seed, lambda u: u.oracle()[0])
        assert by_step == by_oracle and won_step == won_oracle, (seed, by_step, by_oracle)
        assert won_step, (seed, by_step)


@pytest.mark.parametrize("case", sorted(CASES))
def test_oracle_step_is_a_function_of_the_state(case):
    """Two envs reset with one seed write the same reasoning; over the seeds the first reasonings differ."""
    env_id, kwargs, seeds = CASES[case]
    a, b = gym.make(env_id, **kwargs), gym.make(env_id, **kwargs)
    texts = []
    for seed in seeds:
        a.reset(seed=seed)
        b.reset(seed=seed)
        assert a.unwrapped.oracle_step() == b.unwrapped.oracle_step()
        texts.append(a.unwrapped.oracle_step()[0])
    floor = 3 if case == "code" else len(texts) // 2
    assert len(set(texts)) >= floor, texts


@pytest.mark.parametrize("case", sorted(CASES))
def test_random_actions_are_accepted(case):
    """Episodes of random actions only: the env runs every one (action_is_valid, no format penalty)."""
    env_id, kwargs, seeds = CASES[case]
    env = gym.make(env_id, **kwargs)
    rng = np.random.default_rng(5)
    steps = 0
    for seed in list(seeds)[:4]:
        env.reset(seed=seed)
        for _ in range(8):
            a = env.unwrapped.random_action(rng)
            *_, term, trunc, info = env.step(respond("x", a))
            assert info["action_is_valid"] and info["format_penalty"] == 0.0, (seed, a, info)
            steps += 1
            if term or trunc:
                break
    assert steps >= 4


@pytest.mark.parametrize("case", ["searchqa_tiny", "webshop_tiny", "math", "code"])
def test_noisy_demonstrators_answer_from_the_hook(case):
    """noise_action="random" replaces the answer by random_action(rng) (the same draw, replayed here), keeping the
    reasoning; noise_action="first" is SearchQA's habit (search as the oracle does, then answer `finish[unknown]`
    instead of reading the results) and WebShop's (the oracle's clicks, but Buy Now instead of the asked option),
    and refused elsewhere with an error that names the missing list."""
    env_id, kwargs, _ = CASES[case]
    env = gym.make(env_id, **kwargs)
    env.reset(seed=1)
    u = env.unwrapped
    replay = np.random.default_rng(9)
    replay.random()  # the noise coin
    expected = respond(u.oracle_step()[0], u.random_action(replay))
    assert oracle_response(env, noise=1.0, noise_action="random", rng=np.random.default_rng(9)) == expected
    if case.startswith("searchqa"):
        for seed in range(6):
            env.reset(seed=seed)
            for _turn in range(kwargs["max_turns"]):
                reasoning, (oracle_action,) = u.oracle_step()
                text = oracle_response(env, noise=1.0, noise_action="first", rng=np.random.default_rng(seed))
                final = oracle_action.startswith("finish[")
                assert text == respond(reasoning, "finish[unknown]" if final else oracle_action)
                _, reward, term, _, info = env.step(text)
                if final:  # answered without reading the results: never a success
                    assert term and reward == 0.0 and not info["success"]
                    break
            assert _turn >= 1  # searched first, as the oracle does
        return
    if case.startswith("webshop"):
        for seed in range(6):
            env.reset(seed=seed)
            clicked_options = False
            for _turn in range(kwargs["max_turns"]):
                reasoning, (oracle_action,) = u.oracle_step()
                on_item = u.state.page == "item"
                option = on_item and oracle_action not in {"click[Buy Now]", "click[< Prev]", "click[Back to Search]"}
                text = oracle_response(env, noise=1.0, noise_action="first", rng=np.random.default_rng(seed))
                assert text == respond(reasoning, "click[Buy Now]" if option else oracle_action)
                clicked_options |= option
                _, reward, term, _, info = env.step(text)
                if term:
                    break
            assert term and clicked_options  # bought the planned product without its asked option
            assert 0.0 < reward < 1.0 and not info["success"]
        return
    with pytest.raises(ValueError, match="no fixed action list"):
        oracle_response(env, noise=1.0, noise_action="first", rng=np.random.default_rng(0))


# ---------------------------------------------------------------------------------------------- SearchQA
def test_searchqa_reasoning_names_the_entity_then_reads_the_fact_off_the_results():
    env = gym.make("ragen/SearchQA-v0", **SEARCHQA_TINY)
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        u = env.unwrapped
        name = u.queries[0]
        text, (action,) = u.oracle_step()
        assert name in obs and action == f"search[{name}]" and text.endswith(f"so I search {name}.")
        obs, *_ = env.step(respond(text, action))
        text, (action,) = u.oracle_step()
        gold = u.golds[0]
        assert action == f"finish[{gold}]" and text.endswith(f" of {name} is {gold}.")
        assert gold in obs.split("Search results", 1)[1]  # the answer is read off the results on screen


def test_searchqa_multi_hop_reasoning_follows_the_chain():
    env = gym.make("ragen/SearchQA-v0", **{**SEARCHQA_HOPS, "hops": 3})
    env.reset(seed=3)
    u = env.unwrapped
    assert len(u.queries) == 3
    texts = []
    while True:
        text, (action,) = u.oracle_step()
        texts.append(text)
        *_, term, _, info = env.step(respond(text, action))
        if term:
            break
    assert info["success"] and len(texts) == 4
    for j in (1, 2):  # hop j names the entity that the passage of hop j-1 leads to, then asks about it
        assert f" is {u.queries[j]}; next the " in texts[j] and texts[j].endswith(f" of {u.queries[j]}.")


def test_searchqa_searches_again_after_a_wasted_search():
    """oracle() counts searches and would answer blind; oracle_step() reads the screen and searches the entity."""
    env = gym.make("ragen/SearchQA-v0", **SEARCHQA_TINY)
    env.reset(seed=0)
    u = env.unwrapped
    env.step(respond("x", "search[qqqq]"))
    assert u.oracle() == [f"finish[{u.golds[0]}]"]
    assert u.oracle_step()[1] == [f"search[{u.queries[0]}]"]
    env.step(respond("x", "search[qqqq]"))  # the last turn: both answer
    assert u.oracle_step()[1] == u.oracle()


def test_searchqa_names_every_relation_and_attribute():
    from ragen_envs.searchqa.env import FACT_WORDS
    from ragen_envs.searchqa.knowledge import ATTRIBUTE_QUESTIONS, RELATIONS

    assert set(FACT_WORDS) == set(RELATIONS) | {a for _, a in ATTRIBUTE_QUESTIONS}


#: The data-set fixtures of the tool envs, whose four records oracle_step() solves.
FIXTURES: dict[str, tuple[str, dict[str, Any]]] = {
    "searchqa": ("ragen/SearchQA-v0", {"dataset": fixture_path("searchqa_sample.jsonl")}),
    "webshop": ("ragen/WebShop-v0", {"products": fixture_path("webshop_products.jsonl"),
                                     "instructions": fixture_path("webshop_instructions.jsonl")}),
}


@pytest.mark.parametrize("case", sorted(FIXTURES))
def test_oracle_step_solves_the_data_set_fixture(case):
    env_id, kwargs = FIXTURES[case]
    env = gym.make(env_id, **kwargs)
    for i in range(4):
        env.reset(seed=0, options={"index": i})
        while True:
            text, (action,) = env.unwrapped.oracle_step()
            *_, term, trunc, info = env.step(respond(text, action))
            if term or trunc:
                break
        assert info["success"]


@pytest.mark.parametrize("action, final", [
    ("finish[Korford]", True), ("FINISH [ Korford ]", True), ("search[Korford]", False), ("finish[]", False),
    ("answer[Korford]", False), ("", False),
])
def test_searchqa_final_actions(action, final):
    env = gym.make("ragen/SearchQA-v0", **SEARCHQA_TINY)
    assert env.unwrapped.is_final_action(action) is final


# ---------------------------------------------------------------------------------------------- WebShop
def test_webshop_reasoning_names_the_goal_the_product_and_the_options():
    env = gym.make("ragen/WebShop-v0", **WEBSHOP_TINY)
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        u = env.unwrapped
        goal = u.goal
        text, _ = u.oracle_step()
        assert goal.type in text and all(a in text for a in goal.attributes)
        assert goal.type in obs and all(a in obs for a in goal.attributes)
        seen = [text]
        while True:
            text, (action,) = u.oracle_step()
            seen.append(text)
            if u.state.page == "results":  # the planned product's place on the page, its type, price and bound
                page = u.state.page_items(u.per_page)
                product = u.catalog.products[u.catalog.by_asin[action[6:-1]]]
                assert text.startswith(f"Result {page.index(u.catalog.by_asin[action[6:-1]]) + 1}: {goal.type}")
                assert f"${product.price:,.2f} under ${goal.price_upper:,.2f}" in text
            if u.state.page == "item" and action != "click[Buy Now]":
                assert text == f"The goal asks for {action[6:-1]}." and action.split(": ")[1][:-1] in goal.options
            *_, term, _, info = env.step(respond(text, action))
            if term:
                break
        assert info["success"] and seen[-1].endswith("so I buy.")


def test_webshop_reasoning_turns_pages():
    env = gym.make("ragen/WebShop-v0", **WEBSHOP_PAGES)
    texts = []
    for seed in range(30):
        env.reset(seed=seed)
        u = env.unwrapped
        if u.oracle_plan().rank < u.per_page:
            continue
        env.step(respond("x", u.oracle()[0]))
        text, action = u.oracle_step()
        assert action == ["click[Next >]"]
        texts.append(text)
        assert text == f"The product I want is on page {u.oracle_plan().rank // u.per_page + 1}."
    assert texts


@pytest.mark.parametrize("action, final", [
    ("click[Buy Now]", True), ("click[buy]", True), ("CLICK[ buy now ]", True), ("click[[Buy Now]]", True),
    ("click[Next >]", False), ("search[buy now]", False), ("click[color: red]", False), ("", False),
])
def test_webshop_final_actions(action, final):
    env = gym.make("ragen/WebShop-v0", **WEBSHOP_TINY)
    assert env.unwrapped.is_final_action(action) is final


# ---------------------------------------------------------------------------------------------- MetaMathQA
def _evaluate(expr: str) -> Fraction:
    """An arithmetic expression of the key computation (`3 * 4 + 2 * 5`, `20% of 45`, `20 * 3/4`) with exact
    fractions: a plain recursive evaluator over Python's parse tree."""
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b}

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant):
            return Fraction(str(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        assert isinstance(node, ast.BinOp) and type(node.op) in ops, ast.dump(node)
        return ops[type(node.op)](walk(node.left), walk(node.right))

    return walk(ast.parse(expr.replace("% of", " / 100 *"), mode="eval").body)


def _gold_value(gold: str) -> Fraction:
    m = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", gold)
    return Fraction(int(m.group(2)), int(m.group(3))) * (-1 if m.group(1) else 1) if m else Fraction(gold)


@pytest.mark.parametrize("kind", ["change", "rate", "fraction_of", "percent_off", "chain"])
def test_math_key_computation_is_true_arithmetic_ending_in_the_gold(kind):
    """Every `expression = value` of the key computation holds (evaluated here with exact fractions), and its
    last value is the gold answer (computed by the generator with sympy)."""
    env = gym.make("ragen/MetaMathQA-v0", kinds=(kind,), steps=2, max_value=12)
    for seed in range(25):
        obs, _ = env.reset(seed=seed)
        text, (gold,) = env.unwrapped.oracle_step()
        equations = [e.strip() for e in text.rstrip(".").split(", ")]
        for eq in equations:
            lhs, rhs = eq.split(" = ")
            assert _evaluate(lhs) == Fraction(rhs), (kind, seed, text)
        assert Fraction(equations[-1].split(" = ")[1]) == _gold_value(gold), (text, gold)
        first = re.match(r"-?\d+", text).group(0)
        assert first in obs  # the computation starts from a number of the question


def test_math_linear_equations_and_quadratics():
    env = gym.make("ragen/MetaMathQA-v0", kinds=("linear_equation", "quadratic_roots"))
    for seed in range(20):
        env.reset(seed=seed)
        u = env.unwrapped
        text, (gold,) = u.oracle_step()
        p = u.params
        if u.kind == "linear_equation":
            assert text.startswith(f"{p['a'] - p['c']}x = {p['d'] - p['b']}, x = ")
            assert Fraction(text.rstrip(".").split("x = ")[-1]) == _gold_value(gold)
        else:
            r1, r2 = p["roots"]
            assert text.startswith(f"x = {r1} or x = {r2}, so the {p['ask']} is ")
            assert Fraction(text.rstrip(".").split(" is ")[-1]) == _gold_value(gold)


def test_math_other_kinds_and_records_use_the_last_sentence_of_the_worked_solution():
    from ragen_envs.data import load_records
    from ragen_envs.math.env import METAMATHQA_SCHEMA, last_sentence

    env = gym.make("ragen/MetaMathQA-v0", kinds=("fraction_sum",))
    env.reset(seed=0)
    text, (gold,) = env.unwrapped.oracle_step()
    assert text.startswith("Over a common denominator the sum is ")
    path = fixture_path("math_sample.jsonl")
    records = load_records(path, METAMATHQA_SCHEMA)
    env = gym.make("ragen/MetaMathQA-v0", dataset=path)
    for i, rec in enumerate(records):
        env.reset(seed=0, options={"index": i})
        text, _ = env.unwrapped.oracle_step()
        body = rec["response"].rsplit("The answer is:", 1)[0]
        assert len(text) <= 120 and (text in " ".join(body.split()) or text.endswith("..."))
    assert last_sentence("First. Second one.\nThe answer is: 3") == "Second one."
    assert last_sentence("The answer is: 3") == "The answer follows."
    assert last_sentence("x" * 200 + "\nThe answer is: 3", 20) == "x" * 17 + "..."


def test_math_random_action_is_a_number_of_the_question():
    env = gym.make("ragen/MetaMathQA-v0", kinds=("chain",))
    rng = np.random.default_rng(0)
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        numbers = re.findall(r"\d+", obs)
        drawn = {env.unwrapped.random_action(rng) for _ in range(40)}
        assert drawn == set(numbers)


# ---------------------------------------------------------------------------------------------- Code
@pytest.mark.parametrize("family, word", [("reverse_words", "upper case"), ("reverse_words", "lower case"),
                                          ("is_palindrome", "letters and digits")])
def test_code_plan_says_what_the_statement_asks(family, word):
    """The plan carries the task's variant: it names the case (or the characters kept) exactly when the
    statement asks for it."""
    from ragen_envs.code.tasks import CodeTaskConfig, generate_task, plan_sentence

    hits = 0
    for seed in range(30):
        task = generate_task(np.random.default_rng(seed), CodeTaskConfig(families=(family,), num_tests=2))
        asked = word in task.problem.lower() or (word == "letters and digits" and "only letters and digits"
                                                   in task.problem.lower())
        assert (word in plan_sentence(task).lower()) == asked, (task.problem, plan_sentence(task))
        hits += asked
    assert 0 < hits < 30


def test_code_plan_exists_for_every_family_and_data_sets_say_reference():
    from ragen_envs.code.tasks import FAMILIES, CodeTask, CodeTaskConfig, generate_task, plan_sentence

    for family in FAMILIES:
        task = generate_task(np.random.default_rng(0), CodeTaskConfig(families=(family,), num_tests=2))
        assert plan_sentence(task) != "I write the reference program.", family
    bare = CodeTask("Print 1.", (), reference="print(1)")
    assert plan_sentence(bare) == "I write the reference program."


def test_code_oracle_step_without_a_reference_is_a_clear_error(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"problem": "Print the input.", "tests": [{"input": "1\\n", "output": "1\\n"}]}\n')
    env = gym.make("ragen/Code-v0", dataset=str(path))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="no reference program"):
        env.unwrapped.oracle_step()
