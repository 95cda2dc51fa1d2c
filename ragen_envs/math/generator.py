"""Procedural MetaMathQA-style problems: GSM-like word problems and MATH-like algebra, exact answers by sympy.

Every item is in the MetaMathQA schema, plus the parameters that produced it:

    {"query": "...", "response": "... The answer is: 7/4", "type": "MATH_AnsAug",
     "kind": "linear_equation", "answer": "\\frac{7}{4}", "params": {...}}

`response` is a worked solution ending with "The answer is: <gold>" (the MetaMathQA convention);
`type` is "GSM_AnsAug" for word problems and "MATH_AnsAug" for algebra (MetaMathQA's type names);
`params` holds the drawn numbers so that tests can recompute the answer independently.

Problem kinds (`PROBLEM_KINDS`):

- word: `change` (buy several items, pay with a bill, how much change), `rate` (proportional
  production), `fraction_of` (a fraction of a group, how many are left), `percent_off` (sale price),
  `chain` (a quantity changed by a sequence of operations);
- algebra: `linear_equation` (solve a x + b = c x + d, rational answer), `evaluate_polynomial`
  (f(k) for a polynomial), `expand_product` (expand a product of linear factors, polynomial answer),
  `fraction_sum` (a sum of fractions, "as a common fraction"), `quadratic_roots` (sum, product or
  larger root of a quadratic with integer roots).

Difficulty knobs (`MathConfig`):

- `kinds`: which kinds to draw from (uniformly);
- `max_value`: bound on the magnitude of the drawn numbers (default 20);
- `steps`: length of the problem, 1-5 (default 2): purchase lines in `change`, operations in
  `chain`, degree in `evaluate_polynomial`, linear factors in `expand_product` (steps + 1), terms in
  `fraction_sum` (steps + 1).

All draws come from the caller's `np.random.Generator`, so a seed reproduces the item exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import sympy

from ragen_envs.validation import require_int

WORD_KINDS = ("change", "rate", "fraction_of", "percent_off", "chain")
ALGEBRA_KINDS = (
    "linear_equation",
    "evaluate_polynomial",
    "expand_product",
    "fraction_sum",
    "quadratic_roots",
)
PROBLEM_KINDS = WORD_KINDS + ALGEBRA_KINDS

_NAMES = ("Ava", "Ben", "Carla", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kai", "Lena")
_GOODS = ("notebooks", "pens", "apples", "sandwiches", "tickets", "candles", "mugs", "posters")
_PRODUCTS = ("jacket", "lamp", "backpack", "pair of shoes", "board game", "watch")
_MADE = ("bottles", "boxes", "cookies", "bricks", "pages")
_GROUPS = (
    ("students", "wear glasses", "do not wear glasses"),
    ("marbles", "are red", "are not red"),
    ("trees", "are oaks", "are not oaks"),
    ("books", "are novels", "are not novels"),
)
_X = sympy.Symbol("x")


@dataclass(frozen=True)
class MathConfig:
    """Difficulty knobs (module docstring); validated on construction."""

    kinds: tuple[str, ...] = PROBLEM_KINDS
    max_value: int = 20
    steps: int = 2

    def __post_init__(self) -> None:
        kinds = tuple(self.kinds) if not isinstance(self.kinds, str) else (self.kinds,)
        object.__setattr__(self, "kinds", kinds)
        unknown = [k for k in kinds if k not in PROBLEM_KINDS]
        if not kinds or unknown:
            raise ValueError(f"kinds must be a non-empty subset of {PROBLEM_KINDS}, got {self.kinds!r}")
        object.__setattr__(self, "max_value", require_int("max_value", self.max_value, 5, 10**6))
        object.__setattr__(self, "steps", require_int("steps", self.steps, 1, 5))


def format_answer(value: Any, money: bool = False) -> str:
    """The gold-answer text of an exact sympy value, MetaMathQA-style.

    Integers as digits; with `money=True` rationals with a terminating decimal of at most 2 places as
    decimals (12.5); other rationals as `\\frac{p}{q}`; other expressions with `sympy.latex`.
    """
    value = sympy.nsimplify(value) if isinstance(value, float) else sympy.sympify(value)
    if value.is_Integer:
        return str(int(value))
    if value.is_Rational:
        q = int(value.q)
        twos_fives = q
        for f in (2, 5):
            while twos_fives % f == 0:
                twos_fives //= f
        if money and twos_fives == 1 and 100 % q == 0:
            return f"{float(value):.2f}".rstrip("0").rstrip(".")
        sign = "-" if value < 0 else ""
        return f"{sign}\\frac{{{abs(int(value.p))}}}{{{q}}}"
    return sympy.latex(value)


def _int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _choice(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _nonzero(rng: np.random.Generator, m: int) -> int:
    v = _int(rng, 1, m)
    return v if rng.random() < 0.5 else -v


def _signed(term: int) -> str:
    return f"+ {term}" if term >= 0 else f"- {-term}"


# ---------------------------------------------------------------------- word problems
def _change(rng, cfg):
    name = _choice(rng, _NAMES)
    lines = min(cfg.steps, len(_GOODS))
    goods = [_GOODS[i] for i in rng.permutation(len(_GOODS))[:lines]]
    counts = [_int(rng, 2, max(2, cfg.max_value // 2)) for _ in goods]
    prices = [_int(rng, 1, cfg.max_value) for _ in goods]
    total = sum(sympy.Integer(c) * p for c, p in zip(counts, prices))
    bill = next(b for b in (10, 20, 50, 100, 200, 500, 1000, 10**4, 10**5, 10**6, 10**8) if b > total)
    parts = [f"{c} {g} at ${p} each" for c, g, p in zip(counts, goods, prices)]
    query = (
        f"{name} buys {', '.join(parts[:-1]) + ' and ' if len(parts) > 1 else ''}{parts[-1]}. "
        f"{name} pays with a ${bill} bill. How much change, in dollars, does {name} get back?"
    )
    steps = [f"The {g} cost {c} * ${p} = ${c * p}." for c, g, p in zip(counts, goods, prices)]
    steps.append(f"In total {name} spends ${total}, so the change is ${bill} - ${total} = ${bill - total}.")
    return query, steps, bill - total, {"counts": counts, "prices": prices, "bill": bill}


def _rate(rng, cfg):
    what = _choice(rng, _MADE)
    t1 = _int(rng, 2, max(2, cfg.max_value // 2))
    per_minute = _int(rng, 1, cfg.max_value)
    made = per_minute * t1
    t2 = _int(rng, 2, cfg.max_value)
    answer = sympy.Rational(made, t1) * t2
    query = (
        f"A machine makes {made} {what} in {t1} minutes. Working at the same rate, how many {what} "
        f"does it make in {t2} minutes?"
    )
    steps = [
        f"The machine makes {made} / {t1} = {per_minute} {what} per minute.",
        f"In {t2} minutes it makes {per_minute} * {t2} = {answer} {what}.",
    ]
    return query, steps, answer, {"made": made, "t1": t1, "t2": t2}


def _fraction_of(rng, cfg):
    noun, have, have_not = _choice(rng, _GROUPS)
    den = _int(rng, 2, 9)
    num = _int(rng, 1, den - 1)
    total = den * _int(rng, 1, max(1, cfg.max_value // 2))
    part = sympy.Rational(num, den) * total
    answer = total - part
    query = f"There are {total} {noun}. Exactly {num}/{den} of them {have}. How many of them {have_not}?"
    steps = [f"{num}/{den} of {total} is {part}.", f"So {total} - {part} = {answer} of them {have_not}."]
    return query, steps, answer, {"total": total, "num": num, "den": den}


def _percent_off(rng, cfg):
    item = _choice(rng, _PRODUCTS)
    price = _int(rng, 10, max(10, 10 * cfg.max_value))
    off = _choice(rng, (5, 10, 15, 20, 25, 30, 40, 50, 60, 75))
    discount = sympy.Rational(price * off, 100)
    answer = price - discount
    query = f"A {item} costs ${price}. It is on sale for {off}% off. What is the sale price, in dollars?"
    steps = [
        f"The discount is {off}% of ${price} = ${format_answer(discount, money=True)}.",
        f"The sale price is ${price} - ${format_answer(discount, money=True)} = "
        f"${format_answer(answer, money=True)}.",
    ]
    return query, steps, answer, {"price": price, "off": off}


def _chain(rng, cfg):
    name = _choice(rng, _NAMES)
    value = sympy.Integer(_int(rng, 5, cfg.max_value))
    start = int(value)
    ops: list[tuple[str, int]] = []
    sentences, steps = [], []
    for _ in range(cfg.steps):
        kind = _choice(rng, ("add", "sub", "mul", "half"))
        if kind == "sub" and value <= 1:
            kind = "add"
        if kind == "half" and value % 2:
            kind = "mul"
        if kind == "add":
            k = _int(rng, 1, cfg.max_value)
            new, text = value + k, f"then finds {k} more"
        elif kind == "sub":
            k = _int(rng, 1, int(value) - 1)
            new, text = value - k, f"then gives {k} away"
        elif kind == "mul":
            k = _int(rng, 2, 4)
            new, text = value * k, f"then ends up with {k} times as many"
        else:
            k = 2
            new, text = value / 2, "then loses half of them"
        steps.append(f"After that there are {new} (was {value}).")
        sentences.append(text)
        ops.append((kind, k))
        value = new
    query = (
        f"{name} has {start} stickers. {name} {', '.join(sentences)}. How many stickers does {name} have now?"
    )
    return query, steps, value, {"start": start, "ops": [list(o) for o in ops]}


# ---------------------------------------------------------------------- algebra
def _linear_equation(rng, cfg):
    m = cfg.max_value
    a, c = _nonzero(rng, m), _nonzero(rng, m)
    while c == a:
        c = _nonzero(rng, m)
    b, d = _int(rng, -m, m), _int(rng, -m, m)
    (answer,) = sympy.solve(sympy.Eq(a * _X + b, c * _X + d), _X)
    lhs, rhs = f"{a}x {_signed(b)}", f"{c}x {_signed(d)}"
    query = f"Solve for $x$: ${lhs} = {rhs}$. Express your answer as a common fraction if needed."
    steps = [
        f"Collect the x terms: ({a} - ({c}))x = {d} - ({b}), so {a - c}x = {d - b}.",
        f"Hence x = {d - b}/{a - c} = {answer}.",
    ]
    return query, steps, answer, {"a": a, "b": b, "c": c, "d": d}


def _evaluate_polynomial(rng, cfg):
    degree = min(cfg.steps + 1, 5)
    m = max(2, min(cfg.max_value, 12))
    coeffs = [_int(rng, -m, m) for _ in range(degree)] + [_nonzero(rng, m)]  # c0..c_deg, leading != 0
    k = _int(rng, -5, 5)
    poly = sum(cf * _X**i for i, cf in enumerate(coeffs))
    answer = poly.subs(_X, k)
    query = f"If $f(x) = {sympy.latex(poly)}$, what is the value of $f({k})$?"
    steps = [f"Substitute x = {k}: f({k}) = {sympy.latex(poly.subs(_X, sympy.Symbol(f'({k})')))} = {answer}."]
    return query, steps, answer, {"coeffs": coeffs, "k": k}


def _expand_product(rng, cfg):
    m = max(2, min(cfg.max_value, 15))
    n_factors = min(cfg.steps + 1, 4)
    roots = [_int(rng, -m, m) for _ in range(n_factors)]
    lead = _choice(rng, (1, 1, 2, 3)) if cfg.steps > 1 else 1
    factors = [(_X + r) for r in roots]
    product_text = "".join(f"({sympy.latex(f)})" for f in factors)
    if lead != 1:
        product_text = f"{lead}{product_text}"
    answer = sympy.expand(lead * sympy.Mul(*factors))
    query = f"Expand the product ${product_text}$."
    steps = [f"Multiply out the factors one at a time: {sympy.latex(answer)}."]
    return query, steps, answer, {"roots": roots, "lead": lead}


def _fraction_sum(rng, cfg):
    terms = min(cfg.steps + 1, 5)
    fracs = []
    for _ in range(terms):
        den = _int(rng, 2, max(3, min(cfg.max_value, 15)))
        fracs.append((_int(rng, 1, den - 1), den))
    answer = sum(sympy.Rational(n, d) for n, d in fracs)
    text = " + ".join(f"\\frac{{{n}}}{{{d}}}" for n, d in fracs)
    query = f"What is ${text}$? Express your answer as a common fraction."
    steps = [f"Over a common denominator the sum is {answer}."]
    return query, steps, answer, {"fractions": [list(f) for f in fracs]}


def _quadratic_roots(rng, cfg):
    m = max(2, min(cfg.max_value, 15))
    r1, r2 = _int(rng, -m, m), _int(rng, -m, m)
    while r2 == r1:
        r2 = _int(rng, -m, m)
    poly = sympy.expand((_X - r1) * (_X - r2))
    ask = _choice(rng, ("sum", "product", "larger"))
    roots = sympy.solve(sympy.Eq(poly, 0), _X)
    answer = {"sum": sum(roots), "product": sympy.Mul(*roots), "larger": max(roots)}[ask]
    question = {
        "sum": "the sum of the solutions",
        "product": "the product of the solutions",
        "larger": "the larger solution",
    }[ask]
    query = f"What is {question} of the equation ${sympy.latex(poly)} = 0$?"
    steps = [
        f"The left side factors as ({sympy.latex(_X - r1)})({sympy.latex(_X - r2)}), "
        f"so x = {r1} or x = {r2}.",
        f"Therefore {question} is {answer}.",
    ]
    return query, steps, answer, {"roots": [r1, r2], "ask": ask}


_BUILDERS = {
    "change": _change,
    "rate": _rate,
    "fraction_of": _fraction_of,
    "percent_off": _percent_off,
    "chain": _chain,
    "linear_equation": _linear_equation,
    "evaluate_polynomial": _evaluate_polynomial,
    "expand_product": _expand_product,
    "fraction_sum": _fraction_sum,
    "quadratic_roots": _quadratic_roots,
}


def generate_problem(rng: np.random.Generator, config: MathConfig | None = None) -> dict[str, Any]:
    """One problem in the MetaMathQA schema (+ `kind`, `answer`, `params`), drawn from `rng`."""
    config = config or MathConfig()
    kind = _choice(rng, config.kinds)
    query, steps, value, params = _BUILDERS[kind](rng, config)
    answer = format_answer(value, money=kind == "percent_off")
    response = " ".join(steps) + f"\nThe answer is: {answer}"
    return {
        "query": query,
        "response": response,
        "type": "GSM_AnsAug" if kind in WORD_KINDS else "MATH_AnsAug",
        "kind": kind,
        "answer": answer,
        "params": params,
    }


# ---------------------------------------------------------------------- the key computation
def _show(value: Fraction, money: bool = False) -> str:
    """An exact value as the key computation writes it: `7`, `-3/2`, or with `money` a decimal (`12.5`)."""
    if value.denominator == 1:
        return str(value.numerator)
    if money:
        return f"{float(value):.2f}".rstrip("0").rstrip(".")
    return f"{value.numerator}/{value.denominator}"


def _chain_steps(start: int, ops: list[list[Any]]) -> str:
    """`7 + 3 = 10, 10 * 2 = 20.`: one equation per operation of a `chain` problem."""
    value, steps = Fraction(start), []
    for kind, k in ops:
        sym, new = {"add": ("+", value + k), "sub": ("-", value - k), "mul": ("*", value * k),
                    "half": ("/", value / 2)}[kind]
        steps.append(f"{_show(value)} {sym} {k} = {_show(new)}")
        value = new
    return ", ".join(steps) + "."


def key_computation(kind: str, params: dict[str, Any]) -> str | None:
    """The arithmetic that answers a generated problem, in one short line, from its `params` (recomputed here
    with exact fractions, independently of the worked solution): e.g. `change` with 3 pens at $4 and a $20 bill
    is ``3 * 4 = 12, 20 - 12 = 8.``; the last number is the answer. None for the kinds whose work does not fit
    one line (`evaluate_polynomial`, `expand_product`, `fraction_sum`)."""
    p = params
    if kind == "change":
        total = sum(c * q for c, q in zip(p["counts"], p["prices"], strict=True))
        lines = " + ".join(f"{c} * {q}" for c, q in zip(p["counts"], p["prices"], strict=True))
        return f"{lines} = {total}, {p['bill']} - {total} = {p['bill'] - total}."
    if kind == "rate":
        per = Fraction(p["made"], p["t1"])
        return f"{p['made']} / {p['t1']} = {_show(per)}, {_show(per)} * {p['t2']} = {_show(per * p['t2'])}."
    if kind == "fraction_of":
        part = Fraction(p["num"], p["den"]) * p["total"]
        return (f"{p['total']} * {p['num']}/{p['den']} = {_show(part)}, "
                f"{p['total']} - {_show(part)} = {_show(p['total'] - part)}.")
    if kind == "percent_off":
        off = Fraction(p["price"] * p["off"], 100)
        return (f"{p['off']}% of {p['price']} = {_show(off, True)}, "
                f"{p['price']} - {_show(off, True)} = {_show(p['price'] - off, True)}.")
    if kind == "chain":
        return _chain_steps(p["start"], p["ops"])
    if kind == "linear_equation":
        lhs, rhs = p["a"] - p["c"], p["d"] - p["b"]
        return f"{lhs}x = {rhs}, x = {_show(Fraction(rhs, lhs))}."
    if kind == "quadratic_roots":
        r1, r2 = p["roots"]
        value = {"sum": r1 + r2, "product": r1 * r2, "larger": max(r1, r2)}[p["ask"]]
        return f"x = {r1} or x = {r2}, so the {p['ask']} is {value}."
    return None


def generate_dataset(n: int, seed: int = 0, config: MathConfig | None = None) -> list[dict[str, Any]]:
    """`n` problems from `np.random.default_rng(seed)` (e.g. to write a MetaMathQA-style JSONL file)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    return [generate_problem(rng, config) for _ in range(n)]
