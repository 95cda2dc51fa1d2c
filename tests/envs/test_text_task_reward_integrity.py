"""Reward integrity of the text tasks (Countdown, SearchQA, WebShop): only a real solution earns the reward.

A reviewer's attempts to earn the reward without solving the task, through `env.step` with each env's
documented answer format. Each fixed class has a test that failed before the fix; the attempts that were
already refused are kept as a battery (`test_*_refused_attempts`), so that a change to the parsers or the
scorers cannot reopen them. Bad input always gets a defined penalty or 0, never a crash or a hang.
"""

from __future__ import annotations

import json
import time

import pytest

from ragen_envs.countdown.env import CountdownEnv
from ragen_envs.countdown.expression import ExpressionError, parse_expression
from ragen_envs.protocol import FORMAT_PENALTY
from ragen_envs.searchqa.env import SearchQAEnv, content_words, is_key_word, score_answer
from ragen_envs.spaces import MAX_OBSERVATION_CHARS
from ragen_envs.webshop import WebShopEnv, pages


def respond(answer: str) -> str:
    return f"<think>t</think><answer>{answer}</answer>"


# ---------------------------------------------------------------------------------------------- Countdown
def countdown_at(target: int, nums: list[int], **kwargs) -> CountdownEnv:
    env = CountdownEnv(**kwargs)
    env.reset(seed=0)
    env.target, env.nums, env._solution = target, list(nums), None
    return env


SOLUTION = "8 / (3 - 8 / 3)"  # 24 from [3, 3, 8, 8]


@pytest.mark.parametrize("rhs", ["9" * 5000, "-" + "9" * 400, "1" + "0" * 309])
def test_countdown_a_stated_value_too_long_to_read_is_a_false_equation(rhs):
    # Before: int() refuses over 4,300 digits, and the check then skipped the comparison, so `E = 999...9`
    # was accepted as a true equation (reward 1). A value of an expression has at most 309 digits.
    env = countdown_at(24, [3, 3, 8, 8])
    _, reward, terminated, _, info = env.step(respond(f"{SOLUTION} = {rhs}"))
    assert reward == pytest.approx(FORMAT_PENALTY) and not info["action_is_valid"] and terminated
    with pytest.raises(ExpressionError, match="false equation"):
        parse_expression(f"{SOLUTION} = {rhs}")


def test_countdown_true_equations_with_leading_zeros_or_other_digits_still_count():
    for rhs in ["0" * 5000 + "24", "024", "\uff12\uff14"]:  # leading zeros; fullwidth 24
        env = countdown_at(24, [3, 3, 8, 8])
        assert env.step(respond(f"{SOLUTION} = {rhs}"))[1] == 1.0
    assert parse_expression("3 - 8 = -5").value == -5


@pytest.mark.parametrize(
    "nums, needle",
    [([-3, 5], "element 0 is -3"), ([1, 10**12], "element 1 is 1000000000000"), ([], "1 to 7 numbers")],
)
def test_countdown_dataset_refuses_numbers_no_answer_can_write(tmp_path, nums, needle):
    # Before: a negative number loaded, and even the solver's own answer ("-3 + 5") scored 0, because an answer
    # writes numbers as unsigned literals (the minus is an operation); a 13-digit number could not be written.
    path = tmp_path / "cd.jsonl"
    path.write_text(json.dumps({"target": 2, "nums": nums}) + "\n")
    with pytest.raises(ValueError, match=needle) as err:
        CountdownEnv(dataset=str(path))
    assert "cd.jsonl:1" in str(err.value) and "'nums'" in str(err.value)


def test_countdown_dataset_with_zero_and_twelve_digit_numbers_is_played(tmp_path):
    path = tmp_path / "cd.jsonl"
    path.write_text(json.dumps({"target": 2, "nums": [0, 2]}) + "\n"
                    + json.dumps({"target": 999999999999, "nums": [999999999999]}) + "\n")
    env = CountdownEnv(dataset=str(path))
    for index in (0, 1):
        env.reset(seed=0, options={"index": index})
        assert env.step(respond(env.oracle()[0]))[1] == 1.0


@pytest.mark.parametrize(
    "answer",
    [
        "8 / (3 - 8 / 3) + 0",  # a number not given
        "8 / (3 - 8 / 3) * 1",
        "8 * 3",  # numbers missing
        "8 * 3 + 3 - 3",  # a number used three times
        "(8 + 8 + 8) * 3 / 3",
        "-(-(8 * 3)) + 3 - 3",  # unary signs do not add numbers
        "008 / (3 - 8 / 3)",  # numbers written differently
        "8.0 / (3 - 8 / 3)",
        "8 / (3 - 8 / 3.0)",
        "1e1 + 14",
        "0x18",
        "\uff18 / (3 - \uff18 / 3)",  # fullwidth digits
        "\u0668 / (3 - \u0668 / 3)",  # Arabic-Indic digits
        "8(3 - 8 / 3)",  # implicit multiplication
        "(8)(3)(8)(3)",
        "2 ** 3 * 3",  # exponentiation
        "2 ** 2 ** 2 ** 99",
        "9 ** 9 ** 9 ** 9",
        "8 // 3 * 8 + 3",  # floor division, modulo
        "8 % 3",
        "8 / (3 - 3) + 8",  # division by zero
        "__import__('os').system('true')",  # code
        "(lambda: 24)()",
        "(24).real",
        "[8, 3, 8, 3][0]",
        "exec('24')",
        "8 / (3 - 8 / 3)\n8 * 3",  # several answers in one reply
        "8 / (3 - 8 / 3), 8 * 3 * 3 / 3",
        "8 / (3 - 8 / 3) || 8 + 8 + 3 + 3",
        "8 / (3 - 8 / 3); 24",
        "24",  # the target itself
        "8 / (3 - 8 / 3) = 25",  # a false equation
        "(" * 300 + "24" + ")" * 300,  # deep nesting
        "+".join(["1"] * 400),  # long
        "-" * 5000 + "24",
    ],
)
def test_countdown_refused_attempts(answer):
    env = countdown_at(24, [3, 3, 8, 8])
    start = time.perf_counter()
    _, reward, terminated, _, info = env.step(respond(answer))
    assert time.perf_counter() - start < 2.0  # no hang
    assert reward <= 0.1 and not info["success"] and terminated


def test_countdown_near_values_and_several_answer_blocks_are_not_rewarded():
    # exact rational arithmetic: 24 + 1e-9 and 24 - 1e-9 are not 24 (they use the numbers: 0.1)
    assert countdown_at(24, [24000000001, 1000000000]).step(respond("24000000001 / 1000000000"))[1] == 0.1
    assert countdown_at(24, [23999999999, 1000000000]).step(respond("23999999999 / 1000000000"))[1] == 0.1
    for response in [
        f"<think><answer>{SOLUTION}</answer></think><answer>8 * 3</answer>",  # an answer inside the think block
        f"<think>t</think><answer>8 * 3</answer><answer>{SOLUTION}</answer>",  # first wrong, last right
        f"<think>t</think><answer>{SOLUTION}</answer><answer>8 * 3</answer>",
        f"<think>t</think><answer><answer>{SOLUTION}</answer></answer>",
    ]:
        _, reward, _, _, info = countdown_at(24, [3, 3, 8, 8]).step(response)
        assert reward == pytest.approx(FORMAT_PENALTY) and info["format_error"]


# ---------------------------------------------------------------------------------------------- SearchQA
@pytest.mark.parametrize(
    "answer, gold",
    [
        ("of", "Bank of America"),  # HotpotQA F1 1/2
        ("of", "The Lord of the Rings"),  # 1/2
        ("a", "Vitamin A"),  # 2/3
        ("A", "Type A personality"),  # 1/2
        ("J", "J. K. Rowling"),  # 1/2
        ("1", "U.S. Route 1"),  # 1/2
        ("and", "Marks and Spencer"),  # 1/2
        ("in", "Man in the Iron Mask"),  # 2/5
        ("of of", "Bank of America of Tomorrow"),
    ],
)
def test_searchqa_a_stop_word_or_single_character_earns_no_partial_credit(answer, gold):
    # Before: a part of the gold earned its F1 whatever the part was, so one fixed answer ("of") was paid on
    # every gold with that word.
    reward, em, f1 = score_answer(answer, gold)
    assert (reward, em) == (0.0, False) and f1 > 0.3  # the F1 is still measured


@pytest.mark.parametrize(
    "answer, gold, reward",
    [
        ("Vitamin", "Vitamin A", 2 / 3),
        ("America", "Bank of America", 1 / 2),
        ("of America", "Bank of America", 4 / 5),
        ("Rowling", "J. K. Rowling", 1 / 2),
        ("Route 1", "U.S. Route 1", 4 / 5),
        ("vitamin a", "Vitamin A", 1.0),  # exact matches are unchanged
        ("A", "A", 1.0),
        ("of", "of", 1.0),
        ("no", "no", 1.0),
    ],
)
def test_searchqa_partial_credit_with_a_key_word_is_kept(answer, gold, reward):
    assert score_answer(answer, gold)[0] == pytest.approx(reward)


def test_searchqa_stop_word_answer_through_the_env(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "Which bank?", "answer": "Bank of America",
                                "context": [["Bank of America", ["Bank of America is a bank."]]]}) + "\n")
    env = SearchQAEnv(dataset=str(path))
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(respond("finish[of]"))
    assert terminated and reward == 0.0 and not info["success"] and info["f1"] == pytest.approx(0.5)
    env.reset(seed=0)
    assert env.step(respond("finish[America]"))[1] == pytest.approx(0.5)


def test_searchqa_generated_golds_have_only_key_words():
    # So the rule leaves every reward of the generated worlds (the default data) as it was.
    env = SearchQAEnv(hops=(1, 4))
    for seed in range(60):
        env.reset(seed=seed)
        assert all(is_key_word(w) for g in env.golds for w in content_words(g)), env.golds


def test_searchqa_refused_attempts():
    env = SearchQAEnv()
    env.reset(seed=3)
    passage = env.retriever.search(env.queries[0], 1)[0][0].render().replace("[", "(").replace("]", ")")
    names = " ".join(e.name for e in env.kb.entities.values())
    attempts = [
        f"finish[{env.question}]",  # the question copied
        f"finish[{passage}]",  # a retrieved passage copied
        f"finish[{names}]",  # every entity at once
        f"finish[{env.golds[0]} or something else]",  # the gold plus a hedge
        f"finish[{env.golds[0]}, {env.golds[0]}]",  # the gold twice
        "finish[.]", "finish[the]", "finish[a]", "finish[ ]", "finish[]",  # empty answers
        "finish[unknown]",
    ]
    for attempt in attempts:
        env.reset(seed=3)
        _, reward, _, _, info = env.step(respond(attempt))
        assert reward <= 0.0 and not info["success"], attempt
    # several answers in one reply: only the first is graded, the rest costs the penalty
    env.reset(seed=3)
    _, reward, _, _, info = env.step(respond(f"finish[unknown] || finish[{env.golds[0]}]"))
    assert reward == pytest.approx(FORMAT_PENALTY) and not info["success"]
    # huge and empty searches: a defined outcome, quickly
    for query in ["x " * 8000, "!!!", "\u200b" * 3000]:
        env.reset(seed=3)
        start = time.perf_counter()
        _, reward, terminated, _, info = env.step(respond(f"search[{query}]"))
        assert time.perf_counter() - start < 2.0 and reward == 0.0 and not terminated
    env.reset(seed=3)
    assert env.step(respond("search[]"))[1] == pytest.approx(FORMAT_PENALTY)
    # the turn limit ends the episode with nothing
    env.reset(seed=3)
    for _ in range(env.turn_limit):
        _, reward, terminated, _, info = env.step(respond("search[x]"))
    assert terminated and reward == 0.0 and not info["success"]


# ---------------------------------------------------------------------------------------------- WebShop
@pytest.fixture(scope="module")
def shop() -> WebShopEnv:
    return WebShopEnv()


def test_webshop_a_long_query_keeps_the_results_and_the_turn_line_visible(shop):
    # Before: the results page echoed the query in full, and a long one pushed the products, the buttons and
    # the turn line out of the observation (cut at 16,384 characters): nothing left to click.
    shop.reset(seed=0)
    obs, reward, _, _, info = shop.step(respond("search[" + "polo shirt " * 1480 + "]"))
    assert info["action_is_valid"] and reward == 0.0
    first = shop.catalog.products[shop.state.page_items(shop.per_page)[-1]].asin
    assert len(obs) <= MAX_OBSERVATION_CHARS and f"[{first}]" in obs and obs.endswith("Turn 2 of 9.")
    assert "[... truncated]" not in obs


def test_webshop_a_page_that_fits_is_unchanged(shop):
    for query in ["polo shirt", "cotton " * 300]:
        shop.reset(seed=0)
        obs = shop.step(respond(f"search[{query}]"))[0]
        full = pages.render_page(shop.state, shop.catalog, shop.goal, shop.per_page)
        assert obs == full + "\nTurn 2 of 9."


def _fixed_first_result(env: WebShopEnv) -> list[str]:
    """Search the instruction, open the first result, buy (no options)."""
    env.step(respond(f"search[{env.goal.instruction}]"))
    env.step(respond(f"click[{env.catalog.products[env.state.results[0]].asin}]"))
    return list(env.step(respond("click[Buy Now]")))


def test_webshop_refused_attempts():
    shop = WebShopEnv(max_turns=40)  # room for every attempt
    shop.reset(seed=1)
    other = next(p for p in shop.catalog.products if p.asin not in {
        shop.catalog.products[i].asin for i in shop.catalog.search(shop.goal.instruction, 10)})
    # on the search page nothing can be clicked or bought
    for action in ["click[Buy Now]", "click[buy]", f"click[{other.asin}]", "click[Next >]", "click[medium]"]:
        _, reward, terminated, _, info = shop.step(respond(action))
        assert reward == pytest.approx(FORMAT_PENALTY) and not terminated and shop.state.page == "search", action
    shop.step(respond(f"search[{shop.goal.instruction}]"))
    # on the results page: no purchase, no product that is not listed, no search, no option
    for action in ["click[Buy Now]", f"click[{other.asin}]", f"click[{other.title}]", "search[x]",
                   f"click[{shop.goal.options[0]}]", "click[$10.00]", "\u017fearch[x]", "click[B0]"]:
        _, reward, terminated, _, info = shop.step(respond(action))
        assert reward == pytest.approx(FORMAT_PENALTY) and not terminated and shop.state.page == "results", action
    first = shop.catalog.products[shop.state.results[0]]
    shop.step(respond(f"click[{first.asin}]"))
    # on the item page: options of other products, two purchases, text tricks
    foreign = next(v for vals in other.options.values() for v in vals if v not in
                   {x for vals2 in first.options.values() for x in vals2})
    for action in [f"click[{foreign}]", f"click[{first.asin}]", "click[price: $0.01]", "click[Buy Now Buy Now]",
                   "click[Buy Now] click[Buy Now]", "clic\u212a[Buy Now]"]:
        _, reward, terminated, _, info = shop.step(respond(action))
        assert reward == pytest.approx(FORMAT_PENALTY) and not terminated and shop.state.page == "item", action
    _, reward, terminated, _, info = shop.step(respond("click[Buy Now] || click[Buy Now]"))
    assert terminated and info["actions_executed"] == ["click[Buy Now]"] and len(info["dropped_actions"]) == 1
    assert shop.step(respond("click[Buy Now]"))[1] == 0.0  # nothing after the purchase


def test_webshop_a_fixed_sequence_is_never_a_success(shop):
    # WebShop's partial credit pays a fixed sequence something (its design, kept), never the success score 1:
    # the instruction's options must be selected.
    for seed in range(40):
        shop.reset(seed=seed)
        _, reward, terminated, _, info = _fixed_first_result(shop)
        assert terminated and reward < 1.0 and not info["success"]
