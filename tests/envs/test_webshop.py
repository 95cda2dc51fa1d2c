"""WebShop: the reward formula (hand-computed cases), catalogue and goals, pages, loaders and the env."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from observation_checks import assert_async_vector_env_cleans

from ragen_envs.data import fixture_path
from ragen_envs.protocol import FORMAT_PENALTY
from ragen_envs.webshop import (
    Catalog,
    CatalogConfig,
    Goal,
    Product,
    WebShopEnv,
    best_options,
    generate_catalog,
    generate_goal,
    load_goals,
    load_products,
    normalize_color,
    webshop_score,
)
from ragen_envs.webshop.catalog import price_upper_bound
from ragen_envs.webshop.scoring import fuzzy_ratio, type_reward

SHIRT = Product(
    "B1", "Velra Cotton Slim Fit Polo Shirt", 24.99, "clothing › men › shirts", ("cotton", "slim fit"),
    {"size": ("small", "medium", "x-large"), "color": ("navy", "red")}, "polo shirt", "men's shirts",
)  # fmt: skip
GOAL = Goal(
    "i need ...", ("cotton", "slim fit", "wrinkle free"), ("medium", "navy"), 40.0, "polo shirt",
    "clothing › men › shirts", "men's shirts", "B1",
)  # fmt: skip


def respond(action: str) -> str:
    return f"<think>t</think><answer>{action}</answer>"


def run_oracle(env, seed, options=None):
    env.reset(seed=seed, options=options)
    total, done, info, steps = 0.0, False, {}, 0
    while not done:
        _, r, term, trunc, info = env.step(respond(env.oracle()[0]))
        total += r
        steps += 1
        done = term or trunc
    return total, info, steps


# ---------------------------------------------------------------------------------------------- scoring
def test_score_hand_cases():
    # All three parts met except 'wrinkle free': (2 + 2 + 1) / (3 + 2 + 1).
    s = webshop_score(SHIRT, GOAL, {"size": "medium", "color": "navy"})
    assert s.score == pytest.approx(5 / 6) and s.r_type == 1.0 and s.attribute_matches == 2
    # Wrong colour (red is not in the title either): (2 + 1 + 1) / 6.
    assert webshop_score(SHIRT, GOAL, {"size": "medium", "color": "red"}).score == pytest.approx(4 / 6)
    # No option selected: (2 + 0 + 1) / 6.
    assert webshop_score(SHIRT, GOAL, {}).score == pytest.approx(3 / 6)
    # Over the price bound: (2 + 2 + 0) / 6.
    dear = Product(**{**SHIRT.__dict__, "price": 45.0})
    assert webshop_score(dear, GOAL, {"size": "medium", "color": "navy"}).price_ok is False
    assert webshop_score(dear, GOAL, {"size": "medium", "color": "navy"}).score == pytest.approx(4 / 6)
    # Everything: 1.
    perfect = Goal(
        "g", ("cotton", "slim fit"), ("medium", "navy"), 40.0, "polo shirt", SHIRT.category, SHIRT.query
    )
    assert webshop_score(SHIRT, perfect, {"size": "medium", "color": "navy"}).score == 1.0
    # No price bound: the price term leaves numerator and denominator, (2 + 2) / (3 + 2).
    free = Goal(**{**GOAL.__dict__, "price_upper": None})
    assert webshop_score(SHIRT, free, {"size": "medium", "color": "navy"}).score == pytest.approx(4 / 5)


def test_size_is_matched_exactly_other_options_fuzzily():
    goal = Goal("g", (), ("large",), None, "polo shirt", SHIRT.category, SHIRT.query)
    # 'x-large' contains 'large' (token_set_ratio 100) but size needs an exact match.
    assert fuzzy_ratio("x large", "large") == 100
    assert webshop_score(SHIRT, goal, {"size": "x-large"}).option_matches == 0
    chips = Product(
        "C", "Salu Chips", 5.0, "grocery › snacks › chips", (), {"flavor": ("sea salt",)}, "chips"
    )
    g2 = Goal("g", (), ("salt",), None, "chips", chips.category)
    assert webshop_score(chips, g2, {"flavor": "sea salt"}).option_matches == 1  # fuzzy: subset -> 100


def test_an_option_is_met_by_selecting_it_not_by_the_title():
    red = Product(
        "R",
        "Velra Red Cotton Shirt",
        20.0,
        SHIRT.category,
        ("cotton",),
        {"size": ("medium",), "color": ("red", "navy")},
        "shirt",
    )
    goal = Goal("g", ("cotton",), ("medium", "red"), None, "shirt", SHIRT.category)
    # 'red' is in the title, but the product offers colours: selecting navy buys a navy shirt.
    assert webshop_score(red, goal, {"size": "medium", "color": "navy"}).option_matches == 1
    assert webshop_score(red, goal, {"size": "medium", "color": "red"}).score == 1.0
    # One selected value meets one goal value: (1 + 1) / (1 + 1), never above 1.
    one = Goal("g", ("cotton",), ("medium",), None, "shirt", SHIRT.category)
    assert webshop_score(red, one, {"size": "medium", "color": "red"}).option_matches == 1
    # A product without options is what its title says (deviation 8).
    plain = Product("P", "Velra Red Cotton Shirt", 20.0, SHIRT.category, ("cotton",), {}, "shirt")
    assert webshop_score(plain, Goal("g", (), ("red",), None, "shirt", SHIRT.category), {}).score == 1.0


def test_text_matches_are_whole_words():
    phones = Product(
        "H", "Tara Bluetooth Long Battery Life Headphones", 40.0, "electronics › audio › headphones",
        ("bluetooth", "long battery life"), {"color": ("blue", "brown")}, "headphones", "headphones",
    )  # fmt: skip
    goal = Goal("g", ("bluetooth",), ("brown",), 50.0, "headphones", phones.category, phones.query)
    assert webshop_score(phones, goal, {"color": "brown"}).score == 1.0
    assert webshop_score(phones, goal, {"color": "blue"}).score < 1.0  # "blue" is not in "Bluetooth"
    no_options = Product(**{**phones.__dict__, "options": {}})
    assert webshop_score(no_options, Goal("g", (), ("blue",), None, "headphones"), {}).option_matches == 0
    assert normalize_color("standard") == "standard"  # not "tan"
    assert normalize_color("navy blue") == "blue" and normalize_color("123alabaster") == "alabaster"
    mug = Product("M", "Kofa Pocketsize Mug", 9.0, "home › kitchen › mugs", (), {}, "mug")
    assert webshop_score(mug, Goal("g", ("pocket",), (), None, "mug"), {}).attribute_matches == 0


def test_attribute_found_in_title_features_or_description():
    p = Product(
        "P",
        "Kofa Mug",
        9.0,
        "home › kitchen › mugs",
        ("ceramic",),
        {},
        "mug",
        "",
        "Safe in the dishwasher",
        ("bpa free lid",),
    )
    g = Goal("g", ("ceramic", "bpa free", "dishwasher", "insulated"), (), None, "mug", p.category)
    assert webshop_score(p, g, {}).attribute_matches == 3
    assert webshop_score(p, g, {}).score == pytest.approx(3 / 4)


@pytest.mark.parametrize(
    "goal_type, product_type, category, query, expected",
    [
        ("polo shirt", "polo shirt", "clothing › men › shirts", "men's shirts", 1.0),
        ("polo shirt", "Polo  Shirt", "other › x › y", "q", 1.0),  # the same type (case, spaces)
        # Another type: WebShop's value, at most 0.5 (deviation 6).
        ("polo shirt", "t-shirt", "other › x › y", "q", 0.5),  # WebShop: title_score 1/2 > 0.2 -> 1
        ("throw pillow", "body pillow", "clothing › men › shirts", "men's shirts", 0.5),  # WebShop: query -> 1
        ("alpha beta gamma delta shirt", "shirt", "other › x › y", "q", 0.5),  # 1/5 = 0.2: no match
        ("alpha beta gamma delta shirt", "shirt", "clothing › men › y", "q", 0.5),  # WebShop: 2 levels -> 1
        ("a1 a2 a3 a4 a5 a6 a7 a8 a9 a10 shirt", "shirt", "clothing › men › shirts", "q", 0.1),  # 1/11 < 0.1
        ("polo shirt", "coffee mug", "clothing › men › shirts", "men's shirts", 0.0),  # no common type word
        ("", "coffee mug", "other › x › y", "q", 0.5),  # no goal type: title_score 0.2
    ],
)
def test_type_reward_cases(goal_type, product_type, category, query, expected):
    p = Product("P", "Brand Thing", 1.0, category, (), {}, product_type, query)
    g = Goal("g", (), (), None, goal_type, "clothing › men › shirts", "men's shirts")
    assert type_reward(p, g)[0] == expected


@pytest.mark.parametrize(
    "goal_type, title, category, query, expected",
    [
        ("polo shirt", "Velra T-Shirt", "other › x › y", "q", 1.0),  # title words: 1/2 > 0.2
        ("throw pillow", "Kofa Body Pillow", "home › bedding › pillows", "pillows", 1.0),  # same query
        ("alpha beta gamma delta shirt", "Velra Shirt", "other › x › y", "q", 0.5),
    ],
)
def test_type_reward_without_a_product_type_is_webshops(goal_type, title, category, query, expected):
    p = Product("P", title, 1.0, category, (), {}, "", query)
    g = Goal("g", (), (), None, goal_type, "home › bedding › pillows", "pillows")
    assert type_reward(p, g)[0] == expected


def test_a_different_product_type_never_scores_one():
    # Seed 4 of the default env asks for a throw pillow; WebShop's rule gives a body pillow (same
    # query and category) r_type 1 and score 1.
    env = WebShopEnv()
    env.reset(seed=4)
    assert env.goal.type == "throw pillow"
    others = [p for p in env.catalog.products if p.category == env.goal.category and p.type != env.goal.type]
    assert any(p.type == "body pillow" for p in others)
    for p in others:
        assert webshop_score(p, env.goal, best_options(p, env.goal)).score <= 0.5, p


def test_normalize_color_matches_webshop_tests():
    # The cases of WebShop's own test suite (tests/web-agent-site/engine/test_normalize.py).
    for text, expected in [("", ""), ("black forest", "black"), ("violet lavender", "lavender"),
                           ("steelivy fuchsia", "fuchsia"), ("123alabaster", "alabaster"),
                           ("webshop", "webshop")]:  # fmt: skip
        assert normalize_color(text) == expected


def test_price_bound_follows_webshops_grid():
    rng = np.random.default_rng(0)
    bounds = {price_upper_bound(rng, 24.99) for _ in range(200)}
    assert bounds == {40.0, 50.0, 60.0}  # larger of two among 30, 40, 50, 60
    assert price_upper_bound(rng, 985.0) is None


def test_best_options_equal_brute_force_over_all_selections():
    rng = np.random.default_rng(1)
    products = generate_catalog(rng, CatalogConfig(num_products=40))
    for target in products[:15]:
        goal = generate_goal(rng, target)
        for p in products[:10] + [target]:
            groups = [[(name, v) for v in vals] + [None] for name, vals in p.options.items()]
            brute = max(
                webshop_score(p, goal, dict(x for x in combo if x is not None)).score
                for combo in itertools.product(*groups)
            )
            assert webshop_score(p, goal, best_options(p, goal)).score == pytest.approx(brute)
        assert webshop_score(target, goal, best_options(target, goal)).score == 1.0


# ---------------------------------------------------------------------------------------------- env
def test_oracle_reaches_one_on_many_seeds():
    env = WebShopEnv(num_products=300, goal_attributes=(1, 3))
    for seed in range(40):
        total, info, steps = run_oracle(env, seed)
        assert total == 1.0 and info["success"] and info["score"] == 1.0 and steps <= 9


def test_generated_goals_have_a_perfect_product_brute_force():
    env = WebShopEnv(num_products=200, goal_attributes=(2, 3))
    for seed in range(5):
        env.reset(seed=seed)
        best = max(
            webshop_score(p, env.goal, dict(sel)).score
            for p in env.catalog.products
            for sel in [best_options(p, env.goal)]
        )
        assert best == 1.0


def test_check_env_determinism_and_catalogue_cache():
    env = WebShopEnv(num_products=100)
    check_env(env, skip_render_check=True)
    other = WebShopEnv(num_products=100)
    assert other.catalog is env.catalog  # same config and seed: built once per process
    a, _ = env.reset(seed=4)
    b, _ = other.reset(seed=4)
    assert a == b
    for _ in range(4):
        act = respond(env.oracle()[0])
        assert env.step(act)[:2] == other.step(act)[:2]


def _state(env):
    s = env.state
    return (s.page, s.query, list(s.results), s.page_no, s.item, dict(s.selected))


def test_pagination():
    env = WebShopEnv(num_products=200, results_per_page=4, max_results=10)
    env.reset(seed=0)
    obs, *_ = env.step(respond("search[shirt cotton]"))
    assert env.state.num_pages(4) == 3 and "page 1 of 3" in obs
    assert "[Next >]" in obs and "[< Prev]" not in obs
    _, r, *_ = env.step(respond("click[< Prev]"))  # not on page 1
    assert r == pytest.approx(FORMAT_PENALTY) and env.state.page_no == 0
    obs, r, *_ = env.step(respond("click[Next >]"))
    assert r == 0.0 and env.state.page_no == 1 and "[< Prev]" in obs and "page 2 of 3" in obs
    obs, *_ = env.step(respond("click[next]"))
    assert env.state.page_no == 2 and "[Next >]" not in obs and obs.count("| $") == 2  # 10 = 4 + 4 + 2
    before = _state(env)
    _, r, *_ = env.step(respond("click[Next >]"))  # no next page
    assert r == pytest.approx(FORMAT_PENALTY) and _state(env) == before
    env.step(respond("click[< Prev]"))
    assert env.state.page_no == 1


def test_invalid_clicks_are_penalised_and_change_nothing():
    env = WebShopEnv(num_products=200)
    env.reset(seed=2)
    # On the search page nothing can be clicked.
    _, r, *_ = env.step(respond("click[Buy Now]"))
    assert r == pytest.approx(FORMAT_PENALTY) and env.state.page == "search"
    env.step(respond("search[shirt]"))
    on_page = env.catalog.products[env.state.page_items(env.per_page)[0]]
    off_page = next(p for i, p in enumerate(env.catalog.products) if i not in env.state.results)
    before = _state(env)
    for bad in (
        f"click[{off_page.asin}]",
        "click[Buy Now]",
        "click[medium]",
        "search[mug]",
        "click[]",
        "buy it",
    ):
        _, r, term, _, info = env.step(respond(bad))
        assert r == pytest.approx(FORMAT_PENALTY) and not info["action_is_valid"] and not term
        assert _state(env) == before
        if env._turn >= 7:
            break
    env2 = WebShopEnv(num_products=200)
    env2.reset(seed=2)
    env2.step(respond("search[shirt]"))
    obs, r, *_ = env2.step(respond(f"click[{on_page.title.upper()}]"))  # titles click too, any case
    assert r == 0.0 and env2.state.page == "item" and on_page.asin in obs
    name, values = next(iter(on_page.options.items()))
    env2.step(respond(f"click[[{values[-1]}]]"))
    assert env2.state.selected == {name: values[-1]}
    env2.step(respond("click[< Prev]"))
    assert env2.state.page == "results" and env2.state.selected == {}


def test_nine_turns_without_buying_end_with_score_zero():
    env = WebShopEnv(num_products=100)
    env.reset(seed=0)
    for t in range(9):
        _, r, term, trunc, info = env.step(respond("nothing"))
        assert not trunc and term == (t == 8)
    assert info["score"] == 0.0 and not info["success"]


def test_nasty_responses_never_crash():
    env = WebShopEnv(num_products=100)
    env.reset(seed=1)
    for resp in [
        "",
        "\x00",
        "x" * 100_000,
        "<answer>click[",
        "<think>a</think><answer>click[" + "[" * 1000 + "]</answer>",
        "<think>a</think><answer>search[日本 🙂]</answer>",
        None,
        3.5,
    ]:
        obs, *_ = env.step(resp)
        assert isinstance(obs, str) and env.observation_space.contains(obs)


# ---------------------------------------------------------------------------------------------- data
def test_fixtures_load_and_the_oracle_solves_them():
    products = load_products(fixture_path("webshop_products.jsonl"))
    assert len(products) == 12 and products[2].price == 12.99  # "$12.99" parsed
    goals = load_goals(fixture_path("webshop_instructions.jsonl"), Catalog(products))
    assert goals[0].type == "polo shirt" and goals[0].options == (
        "medium",
        "navy",
    )  # type taken from the asin
    env = WebShopEnv(
        products=fixture_path("webshop_products.jsonl"),
        instructions=fixture_path("webshop_instructions.jsonl"),
    )
    check_env(env, skip_render_check=True)
    for i in range(4):
        total, info, _ = run_oracle(env, 0, {"index": i})
        assert total == 1.0 and info["success"]
    # Products without instructions: goals are generated from the user's catalogue.
    env = WebShopEnv(products=fixture_path("webshop_products.jsonl"), results_per_page=5)
    for seed in range(10):
        assert run_oracle(env, seed)[0] == 1.0


def _write(tmp_path, name, records):
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return p


GOOD = {
    "asin": "A1",
    "title": "T",
    "price": 1.5,
    "category": "a › b",
    "attributes": ["x"],
    "options": {"size": ["s"]},
}


@pytest.mark.parametrize(
    "second, needle",
    [
        ({k: v for k, v in GOOD.items() if k != "price"} | {"asin": "A2"}, ":2: missing field 'price'"),
        (GOOD | {"asin": "A2", "price": "cheap"}, ":2: field 'price': must be a number"),
        (GOOD | {"asin": "A2", "attributes": ["x", 3]}, ":2: field 'attributes[1]': expected str"),
        (
            GOOD | {"asin": "A2", "options": {"size": "s"}},
            ":2: field 'options': option 'size' must be a non-empty list",
        ),
        (GOOD | {"asin": "A2", "price": True}, ":2: field 'price': expected int or float or str, got bool"),
        (GOOD, "record 2: field 'asin': 'A1' already used"),
    ],
)
def test_product_loader_errors(tmp_path, second, needle):
    path = _write(tmp_path, "p.jsonl", [GOOD, second])
    with pytest.raises(ValueError) as exc:
        WebShopEnv(products=path)
    assert str(path) in str(exc.value) and needle in str(exc.value)


@pytest.mark.parametrize(
    "record, needle",
    [
        ({"attributes": ["x"]}, ":1: missing field 'instruction'"),
        ({"instruction": "i", "attributes": "x"}, ":1: field 'attributes': expected a list of str"),
        (
            {"instruction": "i", "attributes": [], "options": 5},
            ":1: field 'options': expected list or object",
        ),
        (
            {"instruction": "i", "attributes": [], "options": ["a", 1]},
            ":1: field 'options': must be a list of strings",
        ),
        ({"instruction": "i", "attributes": [], "price_upper": 0}, ":1: field 'price_upper': must be > 0"),
        (
            {"instruction": "i", "attributes": [], "asin": "NOPE"},
            "record 1: field 'asin': 'NOPE' is not in the products",
        ),
    ],
)
def test_instruction_loader_errors(tmp_path, record, needle):
    products = _write(tmp_path, "p.jsonl", [GOOD])
    path = _write(tmp_path, "g.jsonl", [record])
    with pytest.raises(ValueError) as exc:
        WebShopEnv(products=products, instructions=path)
    assert str(path) in str(exc.value) and needle in str(exc.value)


def test_constructor_argument_errors():
    for kwargs, needle in (({"results_per_page": 0}, "results_per_page"),
                           ({"goal_attributes": (3, 1)}, "goal_attributes"),
                           ({"num_products": 5}, "num_products"), ({"instructions": "x.jsonl"}, "needs products"),
                           ({"categories": ("toys",)}, "categories"), ({"max_turns": 0}, "max_turns")):  # fmt: skip
        with pytest.raises(ValueError, match=needle):
            WebShopEnv(**kwargs)


# ---------------------------------------------------------------------------------------------- hostile text
def _on_product_page(seed=2):
    env = WebShopEnv(num_products=200)
    env.reset(seed=seed)
    env.step(respond("search[shirt]"))
    product = env.catalog.products[env.state.page_items(env.per_page)[0]]
    env.step(respond(f"click[{product.asin}]"))
    assert env.state.page == "item"
    return env, product


@pytest.mark.parametrize(
    "action",
    [
        "\u017fearch[Buy Now]",  # long s: used to run click[Buy Now] and end the episode with the score
        "clic\u212a[Buy Now]",  # Kelvin sign
        "cl\u0131ck[Buy Now]",  # dotless i
        "cl\u0130ck[Buy Now]",  # dotted capital I
        "\uff43lick[Buy Now]",  # fullwidth c
        "buy[Buy Now]",
    ],
)
def test_lookalike_verbs_are_invalid_and_buy_nothing(action):
    env, _ = _on_product_page()
    before = _state(env)
    _, r, term, _, info = env.step(respond(action))
    assert not info["action_is_valid"] and not term and r == pytest.approx(FORMAT_PENALTY)
    assert env._purchase is None and _state(env) == before
    _, r, term, *_ = env.step(respond("CLICK[buy now]"))  # ASCII case still does not matter
    assert term and env._purchase is not None


def test_lookalike_letters_in_click_targets_do_not_match():
    env, product = _on_product_page()
    name, values = next(iter(product.options.items()))
    value = next((v for v in values if "s" in v), None)
    if value is None:
        pytest.skip("no option value with an s on this page")
    before = _state(env)
    _, r, _, _, info = env.step(respond("click[" + value.replace("s", "\u017f") + "]"))
    assert not info["action_is_valid"] and _state(env) == before


@pytest.mark.parametrize("text", ["\ud800", "x\udfff", "\U0001f6d2 cart", "\x00"])
def test_echoed_surrogates_stay_in_the_observation_space(text):
    env = WebShopEnv(num_products=100)
    env.reset(seed=1)
    obs, _, _, _, info = env.step(respond(f"search[{text} shirt]"))
    assert info["action_is_valid"] and env.observation_space.contains(obs)
    str(info).encode("utf-8")


def test_async_vector_env_survives_a_lone_surrogate():
    responses = (respond("search[\ud800 shirt]"), respond("click[Back to Search]"), respond("search[mug]"))
    assert_async_vector_env_cleans("ragen/WebShop-v0", responses, "\ud800", num_products=100)


def test_an_option_name_holding_colon_space_is_selected_whole(tmp_path):
    """An item page shows a choice as "name: value"; a name that itself holds ": " must not be cut there (it was:
    clicking "size: us: 9" selected option "size" = "us: 9", and the purchase missed the goal's option)."""
    product = GOOD | {"title": "Trail Shoe", "options": {"size: us": ["8", "9"], "color": ["red", "blue"]}}
    products = _write(tmp_path, "p.jsonl", [product])
    goals = _write(tmp_path, "g.jsonl", [{"instruction": "i need a trail shoe, size: us 9, color: blue",
                                          "attributes": ["x"], "options": {"size: us": "9", "color": "blue"},
                                          "asin": "A1"}])
    env = WebShopEnv(products=products, instructions=goals)
    total, info, _ = run_oracle(env, 0)
    assert total == 1.0 and info["success"]
    env.reset(seed=0)
    env.step(respond("search[trail shoe]"))
    env.step(respond("click[A1]"))
    env.step(respond("click[size: us: 9]"))
    assert env.state.selected == {"size: us": "9"}


def test_two_options_shown_with_one_label_are_refused(tmp_path):
    # "a: b" = "c" and "a" = "b: c" would both be shown as "a: b: c".
    path = _write(tmp_path, "p.jsonl", [GOOD | {"options": {"a: b": ["c"], "a": ["b: c"]}}])
    with pytest.raises(ValueError, match="both shown as 'a: b: c'"):
        WebShopEnv(products=path)
