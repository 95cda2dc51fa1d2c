"""WebShop: search a product catalogue, browse, choose options and buy what an instruction asks for.

Modules: `catalog` (products, goals, seeded generator, strict loaders, BM25 search), `scoring`
(WebShop's reward, from its goal.py), `pages` (the page state machine and its text), `env`
(`WebShopEnv`, id `ragen/WebShop-v0`).
"""

from ragen_envs.webshop.catalog import (
    GOAL_SCHEMA,
    PRODUCT_SCHEMA,
    Catalog,
    CatalogConfig,
    Goal,
    Product,
    generate_catalog,
    generate_goal,
    load_goals,
    load_products,
)
from ragen_envs.webshop.env import WebShopEnv
from ragen_envs.webshop.scoring import ScoreBreakdown, best_options, normalize_color, webshop_score

__all__ = [
    "GOAL_SCHEMA",
    "PRODUCT_SCHEMA",
    "Catalog",
    "CatalogConfig",
    "Goal",
    "Product",
    "ScoreBreakdown",
    "WebShopEnv",
    "best_options",
    "generate_catalog",
    "generate_goal",
    "load_goals",
    "load_products",
    "normalize_color",
    "webshop_score",
]
