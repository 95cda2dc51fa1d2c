"""Reward integrity of WebShop: only the right product with the right options earns success (score 1).

Generated variants (hypothesis) draw an episode of the default env (seeds 0..299) and buy, through
the env's own pages, a wrong purchase: a product of another type in the goal's category (body pillow
for throw pillow, conditioner for shampoo), the goal's product type with one asked-for option
replaced by another value (blue for brown where the title says "Bluetooth"), or with an option left
unselected. Each must score below 1 and not succeed. Responses that wrap the purchase in extra
actions, or put "Buy Now" only in <think>, do not buy.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.webshop import WebShopEnv, best_options, webshop_score
from ragen_envs.webshop.scoring import normalize_color, same_type

#: Examples per generated test (the report counts these).
EXAMPLES = 60

_ENV = WebShopEnv()


def respond(action: str) -> str:
    return f"<think>t</think><answer>{action}</answer>"


def buy(env: WebShopEnv, product, options: dict[str, str]):
    """Buy `product` with `options` through the pages: search its title, page to it, click it, the options,
    Buy Now. Returns the last step's (reward, info), or None when it is not reachable within the turns."""
    ranks = env.catalog.search(product.title, env.max_results)
    idx = env.catalog.by_asin[product.asin]
    if idx not in ranks:
        return None
    rank = ranks.index(idx)
    actions = [f"search[{product.title}]", *["click[Next >]"] * (rank // env.per_page), f"click[{product.asin}]"]
    actions += [f"click[{k}: {v}]" for k, v in options.items()] + ["click[Buy Now]"]
    if len(actions) > env.turn_limit:
        return None
    for action in actions:
        _, reward, terminated, _, info = env.step(respond(action))
        assert info["action_is_valid"], (action, info)
    assert terminated
    return reward, info


def _goal_values(goal) -> set[str]:
    return {normalize_color(o.lower()) for o in goal.options}


@given(seed=st.integers(0, 299), pick=st.integers(0, 10**6))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_another_product_type_never_succeeds(seed, pick):
    env = _ENV
    env.reset(seed=seed)
    goal = env.goal
    others = [p for p in env.catalog.products if p.category == goal.category and not same_type(p.type, goal.type)]
    product = others[pick % len(others)]
    options = best_options(product, goal)
    assert webshop_score(product, goal, options).score <= 0.5
    env.reset(seed=seed)
    result = buy(env, product, options)
    if result is not None:
        reward, info = result
        assert reward <= 0.5 and not info["success"], (seed, product.type, goal.type)


@given(seed=st.integers(0, 299), pick=st.integers(0, 10**6), drop=st.booleans())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_wrong_or_missing_option_never_succeeds(seed, pick, drop):
    env = _ENV
    env.reset(seed=seed)
    goal = env.goal
    wanted = _goal_values(goal)
    if not wanted:
        return
    # products of the goal's type that offer every goal option value (some of them can score 1)
    candidates = [
        p
        for p in env.catalog.products
        if same_type(p.type, goal.type) and webshop_score(p, goal, best_options(p, goal)).score == 1.0
    ]
    product = candidates[pick % len(candidates)]
    options = best_options(product, goal)
    groups = [name for name, value in options.items() if normalize_color(value.lower()) in wanted]
    name = groups[pick % len(groups)]
    if drop:
        options.pop(name)
    else:
        others = [v for v in product.options[name] if normalize_color(v.lower()) not in wanted]
        if not others:
            return
        options[name] = others[pick % len(others)]
    assert webshop_score(product, goal, options).score < 1.0, (seed, options, goal.options, product.title)
    env.reset(seed=seed)
    result = buy(env, product, options)
    if result is not None:
        reward, info = result
        assert reward < 1.0 and not info["success"]


def test_seed_37_blue_bluetooth_headphones_are_not_brown():
    env = _ENV
    env.reset(seed=37)
    assert env.goal.options == ("brown",) and env.goal.type == "headphones"
    # right products (brown scores 1) that also offer blue and say "Bluetooth" in the title
    bluetooth = [
        p
        for p in env.catalog.products
        if "Bluetooth" in p.title
        and "blue" in p.options.get("color", ())
        and webshop_score(p, env.goal, {"color": "brown"}).score == 1.0
    ]
    assert bluetooth
    for product in bluetooth:
        assert webshop_score(product, env.goal, {"color": "blue"}).score < 1.0


@pytest.mark.parametrize("seed", [0, 4, 37])
def test_extra_actions_and_think_do_not_buy(seed):
    env = _ENV
    env.reset(seed=seed)
    for response in (
        "<think>click[Buy Now]</think><answer>search[anything]</answer>",
        "<think>t</think><answer>search[anything] || click[Buy Now]</answer>",
        "<think>t</think><answer>click[Buy Now]</answer>",  # not on the page yet: invalid
        "<think>t</think><answer>search[a]</answer><answer>click[Buy Now]</answer>",
    ):
        env.reset(seed=seed)
        _, reward, terminated, _, info = env.step(response)
        assert reward <= 0.0 and not info["success"] and not terminated, response
