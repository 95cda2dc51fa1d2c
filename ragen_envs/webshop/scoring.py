"""WebShop's reward: how well a purchased product (with its selected options) matches the goal.

Source: Yao et al., "WebShop: Towards Scalable Real-World Web Interaction with Grounded Language
Agents" (NeurIPS 2022), Section 3.2, and its code, `web_agent_site/engine/goal.py` (`get_reward`,
`get_type_reward`, `get_attribute_reward`, `get_option_reward`) and
`web_agent_site/engine/normalize.py` (`normalize_color`). With U the goal and Y the purchase:

    score = r_type * (N_att + N_opt + 1[price(Y) <= u_price]) / (|U_att| + |U_opt| + 1)

- N_att (attribute matches): for each goal attribute g, it counts once if some product attribute p
  has fuzz.token_set_ratio(p, g) > 85, or else if g (lowercase) occurs in the product's title,
  features ("bullet points") or description as whole words.
- N_opt (option matches, goal.py `get_option_reward`): each goal option value g (after
  `normalize_color`) counts once if some *selected* option value v (normalised) matches it: exactly
  for option name "size", else token_set_ratio(v, g) > 85.
- r_type (type match): query_match = (same WebShop query, non-empty here); category_match = at least
  two common levels of the '›'-separated category paths; title_score = |T(Y) ∩ T(U)| / |T(U)| (0.2
  when T(U) is empty). r_type = 1, but 0.5 when none of query_match, category_match, title_score > 0.2
  holds; 0.1 when title_score < 0.1; 0 when title_score == 0 (the later rules win, as in the code).
  When goal and product both carry a product type and the types differ, r_type is at most 0.5
  (deviation 6).

Deviations (documented, all forced by the data we have, bounding the score to [0, 1], or closing a
way to score 1 with the wrong purchase):
1. T(x): WebShop takes the nouns of the product name with spaCy's POS tagger (en_core_web_lg). We use
   the lowercase `\\w+` words of the product's `type` phrase ("polo shirt" -> {polo, shirt}), or of
   its title when it has no type (stop words removed). No POS tagger is needed, and generated products
   carry their type.
2. N_opt counts goal options (as goal.py's loop does), so it never exceeds |U_opt|.
3. A goal without a price bound (`price_upper` None) drops the price term from numerator and
   denominator (WebShop always sets one, 1,000,000 when no grid price fits).
4. query_match needs a non-empty goal query (two products without a query are not "the same query").
5. Strings are lowercased before `normalize_color` and matching (WebShop's data is lowercase already).
6. The right product type: WebShop's r_type is 1 for any product scraped under the same query or
   sharing two category levels, so a body pillow is "the right type" for a throw pillow, and a
   conditioner for a shampoo. Here, when goal and product both have a `type` (generated catalogues
   always do), r_type = 1 needs the same type (same words after lowercasing); a different type keeps
   WebShop's partial credit but at most 0.5, so it never earns the score 1 that counts as success.
   Without a type on either side WebShop's rule applies unchanged.
7. Text matches are on whole words (letters not continuing on either side): WebShop's plain
   substring test lets the option "blue" match a title saying "Bluetooth" and `normalize_color` map
   "standard" to "tan". The same holds for `normalize_color` (WebShop's own test cases still pass).
8. An option value found in the product's text (the fallback the project had for options) counts
   only for a product that has no options at all (its title states what it is); otherwise a goal
   option is met only by selecting it.
Fuzzy matching is `thefuzz`'s `token_set_ratio` as WebShop calls it: RapidFuzz's token_set_ratio on
`default_process`ed strings (lowercase, non-alphanumerics to spaces), rounded to an integer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from rapidfuzz import fuzz, utils

from ragen_envs.searchqa.retriever import ENGLISH_STOPWORDS
from ragen_envs.webshop.catalog import Goal, Product

__all__ = [
    "COLOR_SET",
    "ScoreBreakdown",
    "attribute_matches",
    "best_options",
    "fuzzy_ratio",
    "normalize_color",
    "option_matches",
    "same_type",
    "type_reward",
    "webshop_score",
]

#: Fuzzy-match threshold of goal.py (strictly greater than).
FUZZY_THRESHOLD = 85
#: Options matched exactly rather than fuzzily (goal.py EXACT_MATCH_OPTS).
EXACT_MATCH_OPTS = ("size",)

#: web_agent_site/engine/normalize.py COLOR_SET (order matters: the first substring hit wins).
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream",
    "crystal", "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape",
    "graphite", "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender",
    "lemon", "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint",
    "mocha", "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach",
    "pewter", "pink", "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire",
    "seashell", "silver", "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
    "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)  # fmt: skip

_WORD = re.compile(r"\w+")


def _word_pattern(text: str) -> re.Pattern:
    """`text` as a whole-word pattern: no letter may continue it on either side (digits may: "123alabaster")."""
    return re.compile(r"(?<![a-z])" + re.escape(text) + r"(?![a-z])")


_COLOR_PATTERNS = tuple((color, _word_pattern(color)) for color in COLOR_SET)


def normalize_color(value: str) -> str:
    """WebShop's `normalize_color`: the first COLOR_SET entry in the value as a whole word, else the value."""
    for color, pattern in _COLOR_PATTERNS:
        if pattern.search(value):
            return color
    return value


def fuzzy_ratio(a: str, b: str) -> int:
    """thefuzz's `fuzz.token_set_ratio(a, b)` (0-100, rounded), as WebShop calls it."""
    return int(round(fuzz.token_set_ratio(a, b, processor=utils.default_process)))


def _in_text(value: str, product: Product) -> bool:
    """WebShop's fallback: the value occurs in the title, the bullet points or the description (whole words)."""
    if not value:
        return False
    pattern = _word_pattern(value)
    return any(
        pattern.search(text.lower()) for text in (product.title, " ".join(product.features), product.description)
    )


def attribute_matches(product: Product, goal: Goal) -> int:
    """N_att of goal.py `get_attribute_reward`."""
    n = 0
    for g in goal.attributes:
        g = g.lower()
        if any(fuzzy_ratio(p.lower(), g) > FUZZY_THRESHOLD for p in product.attributes) or _in_text(
            g, product
        ):
            n += 1
    return n


def _value_matches(name: str, value: str, goal_value: str) -> bool:
    """Whether the selected `value` of option `name` meets the (normalised) `goal_value`."""
    v = normalize_color(value.lower())
    if name.lower() in EXACT_MATCH_OPTS:
        return v == goal_value
    return fuzzy_ratio(goal_value, v) > FUZZY_THRESHOLD


def _goal_option_met(goal_value: str, product: Product, selected: Mapping[str, str]) -> bool:
    if any(_value_matches(k, v, goal_value) for k, v in selected.items()):
        return True
    return not product.options and _in_text(goal_value, product)  # deviation 8


def option_matches(product: Product, goal: Goal, selected: Mapping[str, str]) -> int:
    """N_opt of goal.py `get_option_reward`: goal option values met by the selection (deviations 2, 8)."""
    return sum(_goal_option_met(normalize_color(o.lower()), product, selected) for o in goal.options)


def _type_words(product_type: str, fallback_title: str) -> set[str]:
    text = product_type if product_type.strip() else fallback_title
    return {w for w in _WORD.findall(text.lower()) if w not in ENGLISH_STOPWORDS}


def same_type(a: str, b: str) -> bool:
    """Whether two product types are the same (their lowercase words, in order: "Body Pillow" == "body pillow")."""
    return _WORD.findall(a.lower()) == _WORD.findall(b.lower())


def type_reward(product: Product, goal: Goal) -> tuple[float, dict[str, object]]:
    """r_type of goal.py `get_type_reward`, with the details (query_match, category_match, title_score)."""
    query_match = bool(goal.query) and product.query == goal.query
    p_cat = {x.strip() for x in product.category.split("›")}
    g_cat = {x.strip() for x in goal.category.split("›")} if goal.category else set()
    category_match = len(p_cat & g_cat) >= 2
    desired = _type_words(goal.type, "")
    purchased = _type_words(product.type, product.title)
    title_score = 0.2 if not desired else len(purchased & desired) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    if goal.type.strip() and product.type.strip() and not same_type(product.type, goal.type):
        r_type = min(r_type, 0.5)  # deviation 6: another product type is never a full match
    return r_type, {"query_match": query_match, "category_match": category_match, "title_score": title_score}


@dataclass(frozen=True)
class ScoreBreakdown:
    """The score and its parts (see the module docstring for the formula)."""

    score: float
    r_type: float
    attribute_matches: int
    option_matches: int
    price_ok: bool | None
    query_match: bool
    category_match: bool
    title_score: float

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def webshop_score(product: Product, goal: Goal, selected: Mapping[str, str]) -> ScoreBreakdown:
    """WebShop's reward for buying `product` with the `selected` options (option name -> value)."""
    r_type, details = type_reward(product, goal)
    n_att = attribute_matches(product, goal)
    n_opt = option_matches(product, goal, selected)
    price_ok = None if goal.price_upper is None else bool(product.price <= goal.price_upper)
    numerator = n_att + n_opt + (0 if price_ok is None else int(price_ok))
    denominator = len(goal.attributes) + len(goal.options) + (0 if price_ok is None else 1)
    base = numerator / denominator if denominator else 1.0
    return ScoreBreakdown(
        score=base * r_type,
        r_type=r_type,
        attribute_matches=n_att,
        option_matches=n_opt,
        price_ok=price_ok,
        query_match=bool(details["query_match"]),
        category_match=bool(details["category_match"]),
        title_score=float(details["title_score"]),
    )


def best_options(product: Product, goal: Goal) -> dict[str, str]:
    """The option selection that maximises the score of `product` for `goal`.

    Each goal option value is met by one selected value; per option group, choosing the first value
    that meets a goal value not yet met (and skipping groups with none) maximises N_opt, since the
    goal values a group can meet do not depend on the other groups' choices.
    """
    goal_values = [normalize_color(o.lower()) for o in goal.options]
    chosen: dict[str, str] = {}
    met: set[int] = set()
    for name, values in product.options.items():
        for v in values:
            hits = {i for i, g in enumerate(goal_values) if i not in met and _value_matches(name, v, g)}
            if hits:
                chosen[name] = v
                met |= hits
                break
    return chosen
