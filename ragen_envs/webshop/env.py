"""`ragen/WebShop-v0`: find and buy the product an instruction asks for (WebShop, text mode)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ragen_envs import protocol
from ragen_envs.base import TextAgentEnv
from ragen_envs.data import record_index
from ragen_envs.data.cache import BuildCache
from ragen_envs.spaces import MAX_OBSERVATION_CHARS, fit_observation
from ragen_envs.validation import require_int, require_int_range, require_names, require_path
from ragen_envs.webshop import pages
from ragen_envs.webshop.catalog import (
    Catalog,
    CatalogConfig,
    Goal,
    Product,
    generate_catalog,
    generate_goal,
    load_goals,
    load_products,
)
from ragen_envs.webshop.scoring import ScoreBreakdown, attribute_matches, best_options, webshop_score

_GOAL_TRIES = 64
# The verb is ASCII letters only, dispatched on its ASCII lower case: under Unicode re.IGNORECASE
# "ſearch" (U+017F) matches, and it used to run as a click ("ſearch[Buy Now]" bought the product).
_ACTION = re.compile(r"^\s*([A-Za-z]+)\s*\[(.*)\]\s*$", re.DOTALL)
VERBS = ("search", "click")

#: Room kept below the observation limit for what `_observation_text` adds to the page (notice, turn line).
_FOOTER_CHARS = 300
#: One catalogue (and search index) per generator config + seed or per file version, per process.
_CATALOGS: BuildCache[Catalog] = BuildCache()
#: One goal list per instructions file version and catalogue (the goals take fields from it), per process:
#: each env used to read and validate the whole instructions file again (20,000 goals: 1.25 s per env).
_GOALS: BuildCache[list[Goal]] = BuildCache()


def oracle_query(goal: Goal) -> str:
    """The oracle's search keywords: the goal's product type and attributes (else the instruction)."""
    words = " ".join(" ".join([goal.type, *goal.attributes]).split())
    return words or " ".join(goal.instruction.split())


@dataclass(frozen=True)
class OraclePlan:
    """What the oracle does: search `query`, open result number `rank`, select `options`, buy."""

    query: str
    rank: int
    asin: str
    options: dict[str, str]
    score: float

    def turns(self, per_page: int) -> int:
        """search + Next > clicks + product click + option clicks + Buy Now."""
        return 1 + self.rank // per_page + 1 + len(self.options) + 1


def make_plan(
    catalog: Catalog, goal: Goal, per_page: int, max_results: int, max_turns: int, need_perfect: bool
) -> OraclePlan | None:
    """The oracle's plan for `goal`: among the search results reachable within `max_turns`, the first
    product with the best reachable score (score 1 when `need_perfect`, else None if there is none)."""
    query = oracle_query(goal)
    best: OraclePlan | None = None
    for rank, idx in enumerate(catalog.search(query, max_results)):
        product = catalog.products[idx]
        opts = best_options(product, goal)
        plan = OraclePlan(query, rank, product.asin, opts, webshop_score(product, goal, opts).score)
        if plan.turns(per_page) > max_turns:
            continue
        if plan.score >= 1.0:
            return plan
        if not need_perfect and (best is None or plan.score > best.score):
            best = plan
    return best


class WebShopEnv(TextAgentEnv):
    """Shop for a product that matches an instruction: search, browse, choose options, buy (WebShop).

    ## Description
    WebShop (Yao et al., 2022) in text mode, as in RAGEN: the agent reads an instruction ("i need a
    polo shirt that is cotton, with size: medium, and color: navy, and price lower than 40.00
    dollars"), searches a product catalogue, browses result pages, opens a product, selects its
    options and clicks "Buy Now". The catalogue is procedural by default (`catalog.CATEGORY_SPECS`:
    shirts, dresses, sneakers, shampoo, chips, headphones, mugs, pillows, backpacks; brands, attributes,
    options and prices drawn from `catalog_seed`), searched with BM25 (`bm25s`) over titles, attributes
    and types. Instructions are drawn per episode from a target product, as WebShop's synthetic goals
    are; each is verified to be solvable: the oracle's search (goal type and attributes) lists a
    product with score 1 early enough to buy it within the turn limit. User catalogues
    (`products=path`) and instructions (`instructions=path`) are read with strict validation.

    ## Action Space
    `Text` (Unicode, up to 16,384 characters): the model's raw response. The `<answer>` holds one
    action: `search[keywords]` (on the search page only) or `click[element]` where the element is on
    the current page: a product (its ASIN or exact title), an option value (`medium` or
    `size: medium`), `Buy Now`, `Back to Search`, `Next >`, `< Prev` (also `next`, `prev`, `back`,
    `buy`). Case-insensitive. Anything else (including a click on an element that is not on the
    page) is an invalid action.

    ## Observation Space
    `Text` (1 to 16,384 characters): the instruction, the current page (search bar; results with
    pagination; product page with price, attributes, option buttons and the current selection; the
    purchase summary) and the turn counter. A search query too long for the page to fit is clipped where the
    results page repeats it, so the results and buttons always show.

    ## Starting State
    The search page, with an instruction drawn with `self.np_random` (or a record of the
    instructions file chosen with it; `options={"index": i}` picks record i).

    ## Rewards
    On "Buy Now": WebShop's score of the purchase (`ragen_envs.webshop.scoring`, from goal.py):
    `r_type * (N_att + N_opt + 1[price <= bound]) / (|goal attributes| + |goal options| + 1)`, in
    [0, 1]. A product of another type than the goal's (when both have one) has r_type at most 0.5, and an
    option counts only when the selected value is the one asked for (text matches are on whole words),
    so only the right product with the right options can score 1. Other valid actions earn 0. An
    invalid action costs `format_penalty` (-0.1) and leaves the page unchanged.

    ## Episode End
    Terminated by "Buy Now", or when `max_turns` (9) turns are used without buying (score 0; no reward
    can follow, so it terminates rather than truncates, as the other single-task envs do). Never
    truncates; stepping again is a no-op.

    ## Information
    Base keys (`action_is_valid`, `success`, `format_penalty`, ...; `instructions` on reset), `goal`
    (the goal fields) on reset, `page` and `turns_left` after every step; at the end `score` (WebShop's
    score; 0.0 when the turns ran out), and after a purchase `score_breakdown` (r_type, attribute and
    option matches, price_ok, ...), `purchased` (ASIN) and `selected_options`. `success` is True iff
    the score is exactly 1 (RAGEN).

    ## Arguments
    ```python
    import gymnasium as gym
    import ragen_envs
    env = gym.make("ragen/WebShop-v0", num_products=1000, goal_attributes=(1, 3), results_per_page=10)
    env = gym.make("ragen/WebShop-v0", products="items.jsonl", instructions="goals.jsonl")
    ```
    - `num_products` (default 1000, 20 to 20,000), `catalog_seed` (default 0: one fixed catalogue, like WebShop's),
      `categories` (subset of the category paths): the generated catalogue.
    - `goal_attributes`: inclusive range of attributes an instruction asks for (default (1, 3)).
    - `results_per_page` (default 10), `max_results` (default 50, WebShop's).
    - `products`: `.jsonl`/`.json` of `{asin, title, price, category, attributes, options?, type?,
      query?, description?, features?}`; `instructions`: `{instruction, attributes, options?,
      price_upper?, type?, category?, query?, asin?}` (needs `products`; without it instructions are
      generated from the products). Errors name file, line and field.
    - `max_turns` (default 9), `action_format`, `format_penalty`, `render_mode` (None or "ansi").

    ## Version History
    - v0: first version (procedural catalogue, WebShop's reward, bm25s search, strict loaders).

    ## Text format
    ```
    Instruction: i need a polo shirt that is cotton, with size: medium, and color: navy, and price lower than 40.00 dollars
    Search results for "polo shirt cotton": page 1 of 5 (total results: 50)
    [Back to Search] [Next >]
    [B0K3L9QX2M] Velra Cotton Slim Fit Polo Shirt | $24.99
    ...
    Turn 2 of 9.
    ```

    ## Action format
    `<think> the first result fits </think> <answer> click[B0K3L9QX2M] </answer>`; then
    `<answer> click[medium] </answer>`, `<answer> click[navy] </answer>`, `<answer> click[Buy Now] </answer>`.

    ## Training hooks
    `oracle_step()` (the oracle's next action with a sentence on the goal attributes, options and price it
    matches), `random_action(rng)` (a search for a word of the instruction, or a click on a random element
    of the page) and `is_final_action(action)` (Buy Now ends the session with a purchase; searches and
    the other clicks are the tools).
    """  # noqa: E501 (the "Text format" sample reproduces one observation line verbatim)

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"index"})

    ROLE: ClassVar[str] = "You are shopping online for a product that matches an instruction."

    def __init__(
        self,
        *,
        num_products: int = 1000,
        catalog_seed: int = 0,
        categories: tuple[str, ...] | None = None,
        goal_attributes: int | tuple[int, int] = (1, 3),
        results_per_page: int = 10,
        max_results: int = 50,
        products: str | Path | None = None,
        instructions: str | Path | None = None,
        max_turns: int = 9,
        action_format: protocol.ActionFormat = "tagged",
        format_penalty: float = protocol.FORMAT_PENALTY,
        render_mode: str | None = None,
    ):
        super().__init__(
            action_format=action_format,
            max_actions_per_turn=1,
            turn_limit=require_int("max_turns", max_turns, 1),  # the last turn terminates (Episode End)
            format_penalty=format_penalty,
            render_mode=render_mode,
        )
        require_int("results_per_page", results_per_page, 1)
        require_int("max_results", max_results, 1)
        self.goal_attributes = require_int_range("goal_attributes", goal_attributes, 0, 6)
        if instructions is not None and products is None:
            raise ValueError("instructions=... needs products=... (the goals refer to that catalogue)")
        catalog_seed = require_int("catalog_seed", catalog_seed, 0)  # numpy seeds are >= 0
        products = require_path("products", products, allow_none=True)
        instructions = require_path("instructions", instructions, allow_none=True)
        self.per_page = int(results_per_page)
        self.max_results = int(max_results)

        if products is None:
            config = CatalogConfig(
                num_products=num_products, categories=require_names("categories", categories, allow_none=True)
            )
            self.catalog = _CATALOGS.get(
                ("generated", config, catalog_seed),
                lambda: Catalog(generate_catalog(np.random.default_rng(catalog_seed), config)),
            )
        else:
            self.catalog = _CATALOGS.get_for_file(
                products, lambda: Catalog(load_products(Path(products).resolve())), "products"
            )
        # Shared by the envs built on the same files (read once per file version and catalogue, per process);
        # no env changes it.
        self.goals: list[Goal] | None = None
        if instructions is not None:
            catalog = self.catalog
            self.goals = _GOALS.get_for_file_or_build(
                instructions, lambda: load_goals(instructions, catalog), "instructions", scope=catalog
            )

        self.goal: Goal | None = None
        self.state = pages.ShopState()
        self._plan: OraclePlan | None = None
        self._planned = False
        self._purchase: tuple[Product, dict[str, str], ScoreBreakdown] | None = None
        self._score: float | None = None

    # ------------------------------------------------------------------ episode
    def _draw_goal(self) -> tuple[Goal, OraclePlan]:
        for _ in range(_GOAL_TRIES):
            target = self.catalog.products[int(self.np_random.integers(len(self.catalog)))]
            goal = generate_goal(self.np_random, target, self.goal_attributes)
            plan = make_plan(
                self.catalog, goal, self.per_page, self.max_results, self.turn_limit, need_perfect=True
            )
            if plan is not None:
                return goal, plan
        raise RuntimeError(
            f"no solvable instruction found in {_GOAL_TRIES} draws: raise max_turns or results_per_page, "
            "or use a larger catalogue"
        )

    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.goals is not None:
            index = record_index(options, len(self.goals), self.np_random)
            self.goal, self._plan, self._planned = self.goals[index], None, False
            extra["index"] = index
        else:
            self.goal, self._plan = self._draw_goal()
            self._planned = True
        self.state = pages.ShopState()
        self._purchase = None
        self._score = None
        return {"goal": self.goal.as_dict(), **extra}

    def _match_action(self, piece: str) -> str | None:
        m = _ACTION.match(piece)
        if not m:
            return None
        verb, arg = m.group(1).lower(), " ".join(m.group(2).split())
        if verb not in VERBS:
            return None
        if len(arg) >= 2 and arg[0] == "[" and arg[-1] == "]":
            arg = arg[1:-1].strip()  # click[[Buy Now]]: the page shows elements in brackets
        if not arg:
            return None
        if verb == "search":
            return f"search[{arg}]" if self.state.page == "search" else None
        element = pages.resolve_click(arg, self.state, self.catalog, self.per_page)
        return None if element is None else f"click[{element}]"

    def _execute(self, action: str) -> tuple[float, bool]:
        verb, arg = action.split("[", 1)
        arg = arg[:-1]
        if verb == "search":
            pages.apply_search(self.state, self.catalog, arg, self.max_results)
            return 0.0, False
        product_idx = self.state.item
        if pages.apply_click(self.state, arg, self.catalog):
            product = self.catalog.products[product_idx]
            selected = dict(self.state.selected)
            breakdown = webshop_score(product, self.goal, selected)
            self._purchase = (product, selected, breakdown)
            self._score = breakdown.score
            return breakdown.score, True
        return 0.0, False

    def _on_turn_limit(self) -> None:
        self._score = 0.0  # the turns ran out without a purchase

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        extra: dict[str, Any] = {"page": self.state.page, "turns_left": max(0, self.turn_limit - self._turn)}
        if self._terminated and not info.get("episode_over"):
            extra["score"] = float(self._score or 0.0)
            if self._purchase is not None:
                product, selected, breakdown = self._purchase
                extra.update(
                    purchased=product.asin, selected_options=selected, score_breakdown=breakdown.as_dict()
                )
        return extra

    def _is_success(self) -> bool:
        return self._score is not None and self._score >= 1.0

    # ------------------------------------------------------------------ text
    def _task_instructions(self) -> str:
        return (
            "Find and buy the product that best matches the instruction. On the search page use "
            "search[keywords]; on the other pages click an element shown in [brackets] with "
            "click[element]: a product by its ASIN, an option value such as click[medium], click[Buy Now], "
            "click[Back to Search], click[Next >] or click[< Prev]. Select every option the instruction "
            "asks for before clicking Buy Now.\n"
            f"One action per turn; you have {self.turn_limit} turns. The reward, given when you buy, is "
            "the fraction of the instruction's attributes, options and price bound that the purchase "
            "meets (reduced for another kind of product); only a perfect match (1.0) counts as a success."
        )

    def _answer_example(self) -> str:
        return "search[cotton polo shirt]"

    def _state_text(self) -> str:
        if self.goal is None:
            return "No instruction yet: call reset()."
        purchase = None
        if self._purchase is not None:
            purchase = (self._purchase[0], self._purchase[1], self._purchase[2].score)
        text = pages.render_page(self.state, self.catalog, self.goal, self.per_page, purchase)
        overflow = len(text) - (MAX_OBSERVATION_CHARS - _FOOTER_CHARS)
        if overflow > 0 and self.state.page == "results":
            # A long query echoed in full pushed the results, the buttons and the turn line out of the
            # observation (cut at its limit), so the agent could not see what to click. Clip the echo only
            # when the page would not fit: every page that fits stays as it was.
            keep = max(40, len(self.state.query) - overflow)
            text = pages.render_page(self.state, self.catalog, self.goal, self.per_page, purchase, keep)
        return fit_observation(text)

    def _observation_text(self, notice: str | None) -> str:
        # The turn counter is shown to the agent but is not part of the state text (which an invalid
        # action must leave unchanged).
        text = self._state_text()
        if self.goal is not None and self.state.page != "done":
            if self._turn >= self.turn_limit:
                text += "\nNo turns left: the session is over (score 0)."
            else:
                text += f"\nTurn {self._turn + 1} of {self.turn_limit}."
        return f"{notice}\n{text}" if notice else text

    # ------------------------------------------------------------------ oracle
    def oracle_plan(self) -> OraclePlan | None:
        """The oracle's plan for the current goal (computed on first use for instructions from a file)."""
        if self.goal is None:
            raise RuntimeError("call reset() before asking for the oracle")
        if not self._planned:
            self._plan = make_plan(
                self.catalog, self.goal, self.per_page, self.max_results, self.turn_limit, need_perfect=False
            )
            self._planned = True
        return self._plan

    def oracle(self) -> list[str]:
        """[the next answer of an oracle policy] (the action, e.g. `click[Buy Now]`, to put in
        `<answer>...</answer>`, as `ragen_core.apps.env_demo` does): search the goal keywords, open the
        planned product (paging as needed), select its options, Buy Now. Works from any page."""
        plan = self.oracle_plan()
        s = self.state
        if plan is None:
            action = (
                "search[" + oracle_query(self.goal) + "]" if s.page == "search" else f"click[{pages.BACK}]"
            )
        elif s.page == "search":
            action = f"search[{plan.query}]"
        elif s.page == "results":
            target_page = plan.rank // self.per_page
            if s.query != plan.query:
                action = f"click[{pages.BACK}]"
            elif s.page_no < target_page:
                action = f"click[{pages.NEXT}]"
            elif s.page_no > target_page:
                action = f"click[{pages.PREV}]"
            else:
                action = f"click[{plan.asin}]"
        elif s.page == "item":
            if self.catalog.products[s.item].asin != plan.asin:
                action = f"click[{pages.PREV}]"
            else:
                missing = [(k, v) for k, v in plan.options.items() if s.selected.get(k) != v]
                action = f"click[{missing[0][0]}: {missing[0][1]}]" if missing else f"click[{pages.BUY}]"
        else:
            action = f"click[{pages.BUY}]"
        return [action]

    # ------------------------------------------------------------------ training hooks
    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """(reasoning, [action]): `oracle()`'s next action with one sentence on why, from the goal and the page.

        E.g. on the search page ``I need a body pillow that is cooling, so I search for it.``; on the results
        page ``Result 2: body pillow, cooling, $45.99 under $80.00.`` (the planned product's place on the page,
        its type, the goal attributes it has and its price against the bound); on its page ``The goal asks for
        size: king.`` then ``Selected king, yellow; $45.99 is under $80.00, so I buy.``; elsewhere a short
        sentence on the way back (another search's results, another product's page, the plan's page).
        """
        (action,) = self.oracle()
        return self._oracle_reason(action), [action]

    def _oracle_reason(self, action: str) -> str:
        """The sentence of `oracle_step` for `action` on the current page (see there)."""
        goal, s, plan = self.goal, self.state, self.oracle_plan()
        bound = "" if goal.price_upper is None else f" under {pages.money(goal.price_upper)}"
        if s.page == "search":
            want = f" that is {', '.join(goal.attributes)}" if goal.attributes else ""
            return f"I need a {goal.type or 'product'}{want}, so I search for it."
        if plan is None or s.page == "done":
            return "No product fits better; I start again." if s.page != "done" else "I have bought it."
        if s.page == "results":
            if action == f"click[{pages.BACK}]":
                return "These results are not from my search; I go back."
            if action in (f"click[{pages.NEXT}]", f"click[{pages.PREV}]"):
                return f"The product I want is on page {plan.rank // self.per_page + 1}."
            product = self.catalog.products[self.catalog.by_asin[plan.asin]]
            position = s.page_items(self.per_page).index(self.catalog.by_asin[plan.asin]) + 1
            parts = [product.type or "product", *self._attributes_met(product)]
            return f"Result {position}: {', '.join(parts)}, {pages.money(product.price)}{bound}."
        if action == f"click[{pages.PREV}]":
            return "This is not the product I want; I go back."
        if action != f"click[{pages.BUY}]":
            return f"The goal asks for {action[6:-1]}."
        product = self.catalog.products[s.item]
        chosen = f"Selected {', '.join(s.selected.values())}; " if s.selected else ""
        price = pages.money(product.price)
        return f"{chosen}{f'{price} is{bound}' if bound else f'it costs {price}'}, so I buy."

    def _attributes_met(self, product: Product) -> list[str]:
        """The goal attributes `product` has, in the goal's order (WebShop's attribute match, one by one)."""
        return [a for a in self.goal.attributes
                if attribute_matches(product, dataclasses.replace(self.goal, attributes=(a,)))]

    def noise_answer(self, kind: str, rng: np.random.Generator) -> str:
        """The habit ``"first"``: the oracle's action, except that on the planned product's page it buys at once
        (`click[Buy Now]`) instead of clicking the option values the instruction asks for (a habit that ignores the
        instruction's options: such a purchase scores below 1 and is never a success when the goal names an
        option); ``"random"``: the default, the env's `random_action` (a search for one word of the instruction, or
        a click on a random element of the page)."""
        if kind == "first":
            (action,) = self.oracle()
            navigation = {f"click[{b}]" for b in (pages.BUY, pages.PREV, pages.BACK, pages.NEXT)}
            if self.state.page == "item" and action not in navigation:  # an option click
                return f"click[{pages.BUY}]"
            return action
        return super().noise_answer(kind, rng)

    def random_action(self, rng: np.random.Generator) -> str:
        """A valid but uninformed action (the random-action hook): on the search page a search for one word of
        the instruction, drawn uniformly; on any other page a click on one of its elements (products, option
        values, buttons), drawn uniformly; after the purchase `click[Buy Now]` (a no-op). Draws only from `rng`."""
        if self.goal is None:
            raise RuntimeError("call reset() before asking for a random action")
        if self.state.page == "search":
            words = self.goal.instruction.replace("[", " ").replace("]", " ").split() or ["product"]
            return f"search[{words[int(rng.integers(len(words)))]}]"
        elements = sorted(set(pages.clickables(self.state, self.catalog, self.per_page).values()))
        if not elements:
            return f"click[{pages.BUY}]"
        return f"click[{elements[int(rng.integers(len(elements)))]}]"

    def is_final_action(self, action: str) -> bool:
        """Whether `action` (an action text, e.g. from `info["actions_executed"]`) is the purchase: a click on
        Buy Now (or its alias `buy`). Searches and every other click are tool use."""
        m = _ACTION.match(action)
        if not m or m.group(1).lower() != "click":
            return False
        arg = " ".join(m.group(2).split()).strip("[] ")
        return protocol.fold_case(arg) in (protocol.fold_case(pages.BUY), "buy")
