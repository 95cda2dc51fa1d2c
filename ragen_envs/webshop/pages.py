"""WebShop's pages as a small state machine, rendered as text.

Pages (WebShop's web_agent_site, minus the Description / Features / Reviews sub-pages):

    search   the search bar only                         actions: search[keywords]
    results  one page of results (`per_page` products)   clicks: Back to Search, < Prev (page > 1),
                                                          Next > (more pages), a product (ASIN or title)
    item     one product: price, attributes, options     clicks: Back to Search, < Prev (back to the
                                                          results page), an option value, Buy Now
    done     after Buy Now                                nothing

`clickables(state)` maps what can be clicked on the current page (lowercase, whitespace-collapsed
label) to the canonical element, so a click on anything that is not on the page is rejected before
it can change the state. Option values may be clicked bare (`medium`) or with their option name
(`size: medium`); a bare value shared by two option groups selects it in the first group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ragen_envs.protocol import fold_case
from ragen_envs.webshop.catalog import Catalog, Goal, Product

__all__ = ["BACK", "BUY", "NEXT", "PREV", "ShopState", "apply_click", "clickables", "money", "render_page"]

BACK = "Back to Search"
NEXT = "Next >"
PREV = "< Prev"
BUY = "Buy Now"
#: Extra spellings accepted for the navigation buttons.
BUTTON_ALIASES = {"next": NEXT, "prev": PREV, "< previous": PREV, "previous": PREV, "back": BACK, "buy": BUY}


def _key(text: str) -> str:
    # fold_case, not casefold: "ſmall" must not click "small" (see ragen_envs.protocol.fold_case).
    return fold_case(" ".join(text.split()))


@dataclass
class ShopState:
    """Where the shopper is. `results` are catalogue indices; `page_no` is 0-based."""

    page: str = "search"
    query: str = ""
    results: list[int] = field(default_factory=list)
    page_no: int = 0
    item: int | None = None
    selected: dict[str, str] = field(default_factory=dict)

    def num_pages(self, per_page: int) -> int:
        return max(1, -(-len(self.results) // per_page))

    def page_items(self, per_page: int) -> list[int]:
        return self.results[self.page_no * per_page : (self.page_no + 1) * per_page]


def clickables(state: ShopState, catalog: Catalog, per_page: int) -> dict[str, str]:
    """label key -> canonical element for every clickable element of the current page.

    Canonical elements: BACK, NEXT, PREV, BUY, a product ASIN, or "option name: value".
    """
    out: dict[str, str] = {}

    def add(label: str, element: str) -> None:
        out.setdefault(_key(label), element)

    if state.page == "results":
        add(BACK, BACK)
        if state.page_no > 0:
            add(PREV, PREV)
        if state.page_no + 1 < state.num_pages(per_page):
            add(NEXT, NEXT)
        for i in state.page_items(per_page):
            p = catalog.products[i]
            add(p.asin, p.asin)
            add(p.title, p.asin)
    elif state.page == "item":
        add(BACK, BACK)
        add(PREV, PREV)
        product = catalog.products[state.item]
        for name, values in product.options.items():
            for v in values:
                add(f"{name}: {v}", f"{name}: {v}")
        for name, values in product.options.items():
            for v in values:
                add(v, f"{name}: {v}")
        add(BUY, BUY)
    present = set(out.values())
    for alias, button in BUTTON_ALIASES.items():
        if button in present:
            out.setdefault(alias, button)
    return out


def resolve_click(label: str, state: ShopState, catalog: Catalog, per_page: int) -> str | None:
    """The canonical element a click on `label` means on the current page, or None if not on it."""
    return clickables(state, catalog, per_page).get(_key(label))


def apply_search(state: ShopState, catalog: Catalog, query: str, max_results: int) -> None:
    state.page, state.query, state.page_no, state.item = "results", query, 0, None
    state.results = catalog.search(query, max_results)
    state.selected = {}


def apply_click(state: ShopState, element: str, catalog: Catalog) -> bool:
    """Apply a canonical click (from `clickables`); returns True when it was Buy Now."""
    if element == BACK:
        state.page, state.query, state.results, state.page_no, state.item = "search", "", [], 0, None
        state.selected = {}
    elif element == NEXT:
        state.page_no += 1
    elif element == PREV:
        if state.page == "item":
            state.page, state.item, state.selected = "results", None, {}
        else:
            state.page_no -= 1
    elif element == BUY:
        state.page = "done"
        return True
    elif state.page == "results":
        state.page, state.item, state.selected = "item", catalog.by_asin[element], {}
    else:  # an option "name: value"
        name, value = _option_of(element, catalog.products[state.item])
        state.selected[name] = value
    return False


def _option_of(element: str, product: Product) -> tuple[str, str]:
    """The (option name, value) whose canonical element "name: value" is `element`. Looked up rather than split
    at ": ", which an option's name may itself hold (the catalogue check refuses two pairs with one label)."""
    for name, values in product.options.items():
        for v in values:
            if f"{name}: {v}" == element:
                return name, v
    raise ValueError(f"{element!r} is not an option of product {product.asin}")


def money(x: float) -> str:
    """A price as the pages show it: `$1,234.50`."""
    return f"${x:,.2f}"


def render_page(
    state: ShopState,
    catalog: Catalog,
    goal: Goal,
    per_page: int,
    purchase: tuple[Product, dict[str, str], float] | None = None,
    max_query_chars: int | None = None,
) -> str:
    """The text of the current page (WebShop's text observation, made readable). `max_query_chars` clips the
    search query the results page echoes (None: in full)."""
    lines = [f"Instruction: {goal.instruction}"]
    if state.page == "search":
        lines += ["[Search page] Type your keywords with search[...]."]
    elif state.page == "results":
        n = len(state.results)
        query = state.query
        if max_query_chars is not None and len(query) > max_query_chars:
            query = query[: max(0, max_query_chars - 3)].rstrip() + "..."
        lines.append(f'Search results for "{query}": page {state.page_no + 1} of '
                     f"{state.num_pages(per_page)} (total results: {n})")  # fmt: skip
        buttons = (
            [BACK]
            + ([PREV] if state.page_no > 0 else [])
            + ([NEXT] if state.page_no + 1 < state.num_pages(per_page) else [])
        )
        lines.append(" ".join(f"[{b}]" for b in buttons))
        if not state.results:
            lines.append("No products match these keywords.")
        for i in state.page_items(per_page):
            p = catalog.products[i]
            lines.append(f"[{p.asin}] {p.title} | {money(p.price)}")
    elif state.page == "item":
        p = catalog.products[state.item]
        lines.append(f"[{BACK}] [{PREV}]")
        lines.append(f"{p.title} (ASIN {p.asin})")
        lines.append(f"Price: {money(p.price)}")
        if p.attributes:
            lines.append("Attributes: " + ", ".join(p.attributes))
        for name, values in p.options.items():
            sel = state.selected.get(name)
            chosen = f"  (selected: {sel})" if sel is not None else ""
            lines.append(f"{name}: " + " ".join(f"[{v}]" for v in values) + chosen)
        if p.features:
            lines.append("Features: " + "; ".join(p.features[:5]))
        lines.append(f"[{BUY}]")
    else:  # done
        if purchase is not None:
            product, options, score = purchase
            opts = ", ".join(f"{k}: {v}" for k, v in options.items()) or "no options selected"
            lines.append(
                f"You bought {product.title} ({opts}) for {money(product.price)}. Score: {score:.2f}."
            )
        else:
            lines.append("The shopping session is over.")
    return "\n".join(lines)
