"""The WebShop catalogue: products, goals (instructions), a seeded generator, strict loaders and search.

A product follows WebShop's item format, reduced to what the pages and the reward use:

    {"asin": "B0K3L9QX2M", "title": "Velra Cotton Slim Fit Polo Shirt", "price": 24.99,
     "category": "clothing › men › shirts", "attributes": ["cotton", "slim fit", "machine wash"],
     "options": {"size": ["small", "medium", "large"], "color": ["navy", "red"]},
     "type": "polo shirt", "query": "men's shirts", "description": "", "features": []}

(`category` is WebShop's `product_category` path, levels separated by '›'; `type` stands in for the
nouns WebShop extracts from the product name with spaCy, see `scoring`; `query` is the search query
under which WebShop scraped the product.) A goal holds WebShop's goal fields:

    {"instruction": "i need a cotton polo shirt with size: medium, and color: navy, and price lower
     than 40.00 dollars", "attributes": ["cotton"], "options": ["medium", "navy"], "price_upper": 40.0,
     "type": "polo shirt", "category": "clothing › men › shirts", "query": "men's shirts",
     "asin": "B0K3L9QX2M"}

The generator (`generate_catalog`, `generate_goal`) draws products from category specs (types,
attribute pools, option groups, price ranges) and goals from a target product the way WebShop's
synthetic goals are made: a subset of its attributes, one value per option group, and a price bound
drawn as WebShop does (two of the first four multiples of 10 above the price, the larger one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragen_envs import protocol
from ragen_envs.data import Field, load_records
from ragen_envs.searchqa.retriever import BM25Index

__all__ = [
    "CATEGORY_SPECS",
    "GOAL_SCHEMA",
    "PRODUCT_SCHEMA",
    "Catalog",
    "CatalogConfig",
    "CategorySpec",
    "Goal",
    "Product",
    "generate_catalog",
    "generate_goal",
    "load_goals",
    "load_products",
    "price_upper_bound",
]


@dataclass(frozen=True)
class Product:
    """One product (see the module docstring). `options` maps option name -> values, in page order."""

    asin: str
    title: str
    price: float
    category: str
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    type: str = ""
    query: str = ""
    description: str = ""
    features: tuple[str, ...] = ()

    def search_text(self) -> str:
        """What the search engine indexes: title, attributes and type."""
        return " ".join([self.title, *self.attributes, self.type])


@dataclass(frozen=True)
class Goal:
    """An instruction and WebShop's goal fields (`options` are goal option *values*, as WebShop's)."""

    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    price_upper: float | None
    type: str = ""
    category: str = ""
    query: str = ""
    asin: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "instruction": self.instruction,
            "attributes": list(self.attributes),
            "options": list(self.options),
            "price_upper": self.price_upper,
            "type": self.type,
            "category": self.category,
            "query": self.query,
            "asin": self.asin,
        }


# ---------------------------------------------------------------------------------------------- generator
COLORS = (
    "black",
    "white",
    "navy",
    "red",
    "gray",
    "green",
    "blue",
    "pink",
    "brown",
    "purple",
    "beige",
    "yellow",
)
CLOTHING_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large")


@dataclass(frozen=True)
class CategorySpec:
    """A category of the generator: WebShop-style path, product types, attribute pool, option groups."""

    path: str
    query: str
    types: tuple[str, ...]
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]] = field(hash=False)
    price: tuple[int, int] = (10, 60)


CATEGORY_SPECS: tuple[CategorySpec, ...] = (
    CategorySpec(
        "clothing › men › shirts", "men's shirts", ("shirt", "polo shirt", "t-shirt", "henley shirt"),
        ("cotton", "slim fit", "machine wash", "short sleeve", "long sleeve", "wrinkle free",
         "moisture wicking", "button down"),
        {"size": CLOTHING_SIZES, "color": COLORS}, (10, 60),
    ),
    CategorySpec(
        "clothing › women › dresses", "women's dresses", ("dress", "maxi dress", "wrap dress", "shift dress"),
        ("floral print", "sleeveless", "v-neck", "knee length", "polyester", "hand wash", "pockets",
         "elastic waist"),
        {"size": CLOTHING_SIZES, "color": COLORS}, (20, 90),
    ),
    CategorySpec(
        "shoes › men › sneakers", "men's sneakers", ("sneaker", "running shoe", "walking shoe", "trail shoe"),
        ("non slip", "breathable", "lightweight", "memory foam", "rubber sole", "lace up", "arch support"),
        {"size": ("7", "8", "9", "10", "11", "12"), "color": COLORS}, (30, 120),
    ),
    CategorySpec(
        "beauty › hair care › shampoo", "shampoo", ("shampoo", "conditioner", "hair mask"),
        ("sulfate free", "paraben free", "for dry hair", "argan oil", "natural ingredients", "color safe",
         "cruelty free"),
        {"size": ("8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz"), "scent": ("lavender", "coconut", "mint",
                                                                          "unscented", "citrus")},
        (5, 40),
    ),
    CategorySpec(
        "grocery › snacks › chips", "chips", ("chips", "potato chips", "tortilla chips", "veggie crisps"),
        ("gluten free", "non gmo", "low sodium", "keto friendly", "kettle cooked", "vegan"),
        {"flavor": ("sea salt", "barbecue", "jalapeno", "cheddar", "honey mustard"),
         "size": ("pack of 6", "pack of 12", "pack of 24")},
        (5, 35),
    ),
    CategorySpec(
        "electronics › audio › headphones", "headphones", ("headphones", "earbuds", "headset"),
        ("wireless", "noise cancelling", "bluetooth", "long battery life", "water resistant",
         "built in microphone", "foldable"),
        {"color": COLORS}, (15, 150),
    ),
    CategorySpec(
        "home › kitchen › mugs", "mugs", ("mug", "travel mug", "coffee mug"),
        ("dishwasher safe", "microwave safe", "ceramic", "stainless steel", "insulated", "leak proof"),
        {"size": ("12 oz", "16 oz", "20 oz"), "color": COLORS}, (8, 40),
    ),
    CategorySpec(
        "home › bedding › pillows", "pillows", ("pillow", "body pillow", "throw pillow"),
        ("memory foam", "hypoallergenic", "machine washable", "cooling", "down alternative", "firm support"),
        {"size": ("standard", "queen", "king"), "color": COLORS}, (15, 80),
    ),
    CategorySpec(
        "sports › outdoor › backpacks", "backpacks", ("backpack", "hiking backpack", "daypack"),
        ("waterproof", "lightweight", "laptop compartment", "padded straps", "large capacity", "anti theft"),
        {"color": COLORS}, (20, 120),
    ),
)  # fmt: skip

_BRAND_SYLLABLES = (
    "vel",
    "ra",
    "zen",
    "tri",
    "ko",
    "lu",
    "mar",
    "no",
    "sa",
    "qui",
    "dor",
    "fa",
    "li",
    "ox",
    "pe",
    "ta",
)
_ASIN_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"


#: The most products a generated catalogue may have: it is drawn and indexed once per process, at about 0.25 ms a
#: product (20,000: about 5 s; 100,000 took 24 s and 1,000,000 would take minutes).
MAX_PRODUCTS = 20_000


def _check_num_products(value: object) -> int:
    """`value` as an int in [20, MAX_PRODUCTS], else a one-line ValueError that says why the top is where it is."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 20 <= value <= MAX_PRODUCTS:
        return int(value)
    raise ValueError(
        f"num_products must be an integer in [20, {MAX_PRODUCTS}], got {value!r}: the catalogue is generated and "
        "indexed when the env is built, about 0.25 ms a product; for a larger catalogue give products=FILE"
    )


@dataclass(frozen=True)
class CatalogConfig:
    """Knobs of the generated catalogue (validated).

    Attributes:
        num_products: products in the catalogue, 20..MAX_PRODUCTS (20,000).
        categories: category paths to use (default: all of CATEGORY_SPECS).
        attributes_per_product: inclusive range of attributes per product.
        num_brands: brands per category (more brands, more near-identical products).
    """

    num_products: int = 1000
    categories: tuple[str, ...] | None = None
    attributes_per_product: tuple[int, int] = (3, 5)
    num_brands: int = 12

    def __post_init__(self):
        _check_num_products(self.num_products)
        known = {c.path for c in CATEGORY_SPECS}
        if self.categories is not None:
            bad = [c for c in self.categories if c not in known]
            if bad or not self.categories:
                raise ValueError(
                    f"categories must be a non-empty subset of {sorted(known)}, got {self.categories!r}"
                )
        lo, hi = self.attributes_per_product
        if not 1 <= lo <= hi <= 6:
            raise ValueError(
                f"attributes_per_product must be a range within 1..6, got {self.attributes_per_product!r}"
            )
        if not 1 <= self.num_brands <= 200:
            raise ValueError(f"num_brands must be in [1, 200], got {self.num_brands}")

    def specs(self) -> tuple[CategorySpec, ...]:
        if self.categories is None:
            return CATEGORY_SPECS
        return tuple(c for c in CATEGORY_SPECS if c.path in self.categories)


def _choice(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _subset(rng: np.random.Generator, seq: tuple[str, ...], k: int) -> tuple[str, ...]:
    """k distinct elements of seq, in seq's order (a stable, readable order on the page)."""
    idx = sorted(int(i) for i in rng.choice(len(seq), size=min(k, len(seq)), replace=False))
    return tuple(seq[i] for i in idx)


def _title_case(text: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in text.split())


def generate_catalog(rng: np.random.Generator, config: CatalogConfig) -> list[Product]:
    """Draw `config.num_products` products (unique ASINs), uniformly over the configured categories."""
    specs = config.specs()
    brands = {
        spec.path: sorted({"".join(_choice(rng, _BRAND_SYLLABLES) for _ in range(2)).capitalize()
                           for _ in range(config.num_brands)})
        for spec in specs
    }  # fmt: skip
    products: list[Product] = []
    asins: set[str] = set()
    lo, hi = config.attributes_per_product
    for _ in range(config.num_products):
        spec = _choice(rng, specs)
        while True:
            asin = "B0" + "".join(_ASIN_CHARS[int(i)] for i in rng.integers(len(_ASIN_CHARS), size=8))
            if asin not in asins:
                asins.add(asin)
                break
        ptype = _choice(rng, spec.types)
        attrs = _subset(rng, spec.attributes, int(rng.integers(lo, hi + 1)))
        # The title names the brand, one or two of the attributes and the type (never an option value:
        # WebShop's option reward also counts an option found in the title).
        shown = attrs[: 1 + int(rng.integers(min(2, len(attrs))))]
        title = " ".join(
            [_choice(rng, brands[spec.path]), *(_title_case(a) for a in shown), _title_case(ptype)]
        )
        options = {
            name: _subset(rng, values, int(rng.integers(2, len(values) + 1)))
            for name, values in spec.options.items()
        }
        price = float(int(rng.integers(spec.price[0], spec.price[1]))) + 0.99
        products.append(Product(asin, title, price, spec.path, attrs, options, ptype, spec.query))
    return products


#: WebShop's price grid (goal.py: PRICE_RANGE = [10.0 * i for i in range(1, 100)]).
PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))


def price_upper_bound(rng: np.random.Generator, price: float) -> float | None:
    """WebShop's goal price bound: the larger of two draws among the first four grid prices above
    `price` (None, i.e. no bound, when fewer than two grid prices lie above it)."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return None
    pick = rng.choice(len(above), size=2, replace=False)
    return max(above[int(i)] for i in pick)


_LEADS = ("i need", "i am looking for", "i want to buy", "find me")


def instruction_text(
    ptype: str, attributes: tuple[str, ...], options: dict[str, str], price_upper: float | None, lead: str
) -> str:
    """WebShop-style wording: 'i need a polo shirt that is cotton and slim fit, with size: medium, and
    color: navy, and price lower than 40.00 dollars'."""
    article = "an" if ptype[:1] in "aeiou" else "a"
    text = f"{lead} {article} {ptype}"
    if attributes:
        text += " that is " + (
            ", ".join(attributes[:-1]) + " and " + attributes[-1] if len(attributes) > 1 else attributes[0]
        )
    if options:
        text += ", with " + ", and ".join(f"{k}: {v}" for k, v in options.items())
    if price_upper is not None:
        text += f", and price lower than {price_upper:.2f} dollars"
    return text


def generate_goal(
    rng: np.random.Generator, target: Product, goal_attributes: tuple[int, int] = (1, 3)
) -> Goal:
    """A goal whose target is `target`: some of its attributes, one value per option group, a price bound."""
    lo, hi = goal_attributes
    k = min(int(rng.integers(lo, hi + 1)), len(target.attributes))
    attrs = _subset(rng, target.attributes, k)
    chosen = {name: _choice(rng, values) for name, values in target.options.items()}
    upper = price_upper_bound(rng, target.price)
    text = instruction_text(target.type or target.title.lower(), attrs, chosen, upper, _choice(rng, _LEADS))
    return Goal(
        text, attrs, tuple(chosen.values()), upper, target.type, target.category, target.query, target.asin
    )


# ---------------------------------------------------------------------------------------------- catalogue
class Catalog:
    """Products with a BM25 search engine over title, attributes and type.

    Args:
        products: the catalogue (ASINs must be unique).
    """

    def __init__(self, products: list[Product]):
        if not products:
            raise ValueError("the catalogue has no products")
        self.products = list(products)
        self.by_asin = {p.asin: i for i, p in enumerate(self.products)}
        if len(self.by_asin) != len(self.products):
            raise ValueError("product ASINs must be unique")
        self.index = BM25Index([p.search_text() for p in self.products])

    def __len__(self) -> int:
        return len(self.products)

    def search(self, query: str, max_results: int = 50) -> list[int]:
        """Indices of the best `max_results` products for `query` (BM25, ties by catalogue order)."""
        return [i for i, _ in self.index.top_k(query, max_results)]


# ---------------------------------------------------------------------------------------------- loaders
def _non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def _unclickable(text: str) -> str | None:
    """Why `text` cannot be the argument of a `click[...]` (None when it can): the answer parser splits an
    answer at the action separator '||' before it reads the action, so `click[S||M]` arrives as two broken
    pieces and no response, the oracle's included, could select that option or open that product."""
    if protocol.ACTION_SEPARATOR in text:
        return (f"holds {protocol.ACTION_SEPARATOR!r}, which the answer parser reads as the separator of two "
                "actions, so no response could click it")
    return None


def _asin_problem(value: str) -> str | None:
    return _non_empty(value) or _unclickable(value)


_PRICE = re.compile(r"^\s*\$?\s*(\d+(?:\.\d+)?)\s*$")


def _parse_price(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = _PRICE.match(value) if isinstance(value, str) else None
    return float(m.group(1)) if m else None


def _price_problem(value: Any) -> str | None:
    p = _parse_price(value)
    if p is None:
        return "must be a number or a string like '$12.99'"
    return None if p >= 0 and np.isfinite(p) else "must be >= 0"


def _options_problem(value: dict) -> str | None:
    for name, values in value.items():
        if not name.strip():
            return "option names must not be empty"
        for text in (name, *(values if isinstance(values, list) else ())):
            if isinstance(text, str) and (why := _unclickable(text)):
                return f"option {name!r}: {text!r} {why}"
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) and v.strip() for v in values)
        ):
            return f"option {name!r} must be a non-empty list of non-empty strings"
    # An item page shows each choice as "name: value"; two choices with one label could not be told apart.
    labels: dict[str, tuple[str, str]] = {}
    for name, values in value.items():
        for v in values:
            other = labels.setdefault(f"{name}: {v}", (name, v))
            if other != (name, v):
                return (f"options {other[0]!r}={other[1]!r} and {name!r}={v!r} are both shown as "
                        f"{name + ': ' + v!r}; rename one")
    return None


#: A product record (WebShop's item fields we use; extra fields are kept and ignored).
PRODUCT_SCHEMA = {
    "asin": Field(str, check=_asin_problem),
    "title": Field(str, check=_non_empty),
    "price": Field((int, float, str), check=_price_problem),
    "category": Field(str),
    "attributes": Field(list, item_type=str),
    "options": Field(dict, required=False, check=_options_problem),
    "type": Field(str, required=False),
    "query": Field(str, required=False),
    "description": Field(str, required=False),
    "features": Field(list, required=False, item_type=str),
}


def _goal_options_problem(value: Any) -> str | None:
    if isinstance(value, list):
        return (
            None
            if all(isinstance(v, str) for v in value)
            else "must be a list of strings or an object name -> value"
        )
    if isinstance(value, dict):
        return None if all(isinstance(v, str) for v in value.values()) else "values must be strings"
    return "must be a list of strings or an object name -> value"


def _upper_problem(value: float) -> str | None:
    return None if value > 0 else "must be > 0 (omit it or use null for no price bound)"


#: An instruction record: WebShop's goal fields (`options` = WebShop's `goal_options`, a list of values or
#: an object name -> value; `type` stands in for the goal product name's nouns; `category` = its
#: `product_category`).
GOAL_SCHEMA = {
    "instruction": Field(str, check=_non_empty),
    "attributes": Field(list, item_type=str),
    "options": Field((list, dict), required=False, check=_goal_options_problem),
    "price_upper": Field(float, required=False, nullable=True, check=_upper_problem),
    "type": Field(str, required=False),
    "category": Field(str, required=False),
    "query": Field(str, required=False),
    "asin": Field(str, required=False, nullable=True),
}


def load_products(path: str | Path) -> list[Product]:
    """Read a products file (`.jsonl`/`.json`, PRODUCT_SCHEMA); errors name file, line and field."""
    records = load_records(path, PRODUCT_SCHEMA)
    products, seen = [], {}
    for n, r in enumerate(records, start=1):
        if r["asin"] in seen:
            raise ValueError(
                f"{path}: record {n}: field 'asin': {r['asin']!r} already used by record {seen[r['asin']]}"
            )
        seen[r["asin"]] = n
        options = {k.strip(): tuple(v.strip() for v in vals) for k, vals in (r.get("options") or {}).items()}
        products.append(
            Product(
                r["asin"].strip(),
                " ".join(r["title"].split()),
                float(_parse_price(r["price"])),
                r["category"].strip(),
                tuple(a.strip() for a in r["attributes"]),
                options,
                r.get("type", "").strip(),
                r.get("query", "").strip(),
                r.get("description", ""),
                tuple(r.get("features", [])),
            )
        )
    return products


def load_goals(path: str | Path, catalog: Catalog | None = None) -> list[Goal]:
    """Read an instructions file (`.jsonl`/`.json`, GOAL_SCHEMA).

    When a goal names a target `asin` found in `catalog`, its missing `type`, `category` and `query`
    are taken from that product (WebShop's goals carry them from the target). An `asin` absent from
    the catalogue is an error.
    """
    records = load_records(path, GOAL_SCHEMA)
    goals = []
    for n, r in enumerate(records, start=1):
        opts = r.get("options") or []
        values = tuple(opts.values()) if isinstance(opts, dict) else tuple(opts)
        asin = r.get("asin")
        target = None
        if asin is not None and catalog is not None:
            if asin not in catalog.by_asin:
                raise ValueError(f"{path}: record {n}: field 'asin': {asin!r} is not in the products file")
            target = catalog.products[catalog.by_asin[asin]]
        goals.append(
            Goal(
                r["instruction"].strip(),
                tuple(a.strip() for a in r["attributes"]),
                tuple(v.strip() for v in values),
                None if r.get("price_upper") is None else float(r["price_upper"]),
                r.get("type", target.type if target else ""),
                r.get("category", target.category if target else ""),
                r.get("query", target.query if target else ""),
                asin,
            )
        )
    return goals
