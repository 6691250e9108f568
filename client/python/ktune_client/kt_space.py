"""Kernel Tuner's search-space rules, and their translation into ktune's constraint expressions.

Kernel Tuner (its documentation and `Searchspace`) admits a config of the cartesian product of
`tune_params` when
  - every restriction holds: a string is a Python expression over the params; a callable in the
    list is called with the params as keyword arguments; a (callable, [names]) tuple with those
    params only; `restrictions` that is itself a callable is called with the params dict;
  - and, when any of block_size_x, block_size_y, block_size_z (and ngangs, nworkers, vlength)
    is a param, the product of those present is at most the device's threads per block (1024).

ktune admits a config when every expression of the family's `[space] constraints` is non-zero
(core/expr.hpp: muparser with C integer semantics: `/` truncates, `%` is the C remainder, `&&`
and `||` evaluate both sides). Each restriction becomes one constraint:
  - a string whose Python syntax maps onto that subset (comparisons, and/or/not, + - * / // %,
    ** by a small constant, `x in (a, b)`, `a if c else b`, min, max) is translated, and the
    translation is kept only when it admits exactly what Kernel Tuner's evaluation admits on
    every combination of the params it names (Python's `/` and `//` differ from C's on some
    values; where they differ, the translation is not used);
  - anything else (callables, strings outside the subset or whose translation differs) is
    evaluated here, in the client, on the product of the params it depends on, and the admitted
    combinations are written as one expression: a decision diagram over those params, nested
    `?:` tests, identical branches shared. A diagram longer than MAX_DIAGRAM_CHARS is refused
    (NotSupported): write that restriction as a string in the subset.

Standard library only.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import math
import re
from typing import Any, Callable, Iterable, Optional, Sequence

from .errors import NotSupported

__all__ = ["DEFAULT_BLOCK_SIZE_NAMES", "MAX_THREADS", "MAX_DIAGRAM_CHARS", "Restriction",
           "parse_restrictions", "translate", "admitted_configs", "diagram", "kt_eval_string"]

DEFAULT_BLOCK_SIZE_NAMES = ("block_size_x", "block_size_y", "block_size_z", "ngangs", "nworkers",
                            "vlength")
MAX_THREADS = 1024
MAX_DIAGRAM_CHARS = 200_000


class _Untranslatable(Exception):
    pass


def _c_div(a: Any, b: Any) -> Any:
    """ktune's `/`: truncating between integers, real division otherwise."""
    if b == 0:
        raise ZeroDivisionError("division by zero")
    if _is_int(a) and _is_int(b):
        q = abs(int(a)) // abs(int(b))
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _c_rem(a: Any, b: Any) -> Any:
    if b == 0:
        raise ZeroDivisionError("remainder by zero")
    if _is_int(a) and _is_int(b):
        return int(a) - int(b) * _c_div(int(a), int(b))
    return math.fmod(a, b)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) <= 2 ** 53)


def _c_and(*values: Any) -> int:
    return 1 if all(v != 0 for v in values) else 0


def _c_or(*values: Any) -> int:
    return 1 if any(v != 0 for v in values) else 0


_HELPERS = {"_div": _c_div, "_rem": _c_rem, "_and": _c_and, "_or": _c_or, "min": min,
            "max": max, "__builtins__": {}}

_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
            ast.GtE: ">="}


class _Translator:
    """Python expression AST -> (ktune text, Python text with ktune's semantics)."""

    def __init__(self, params: Sequence[str]) -> None:
        self.params = set(params)
        self.used: list[str] = []

    def visit(self, node: ast.AST) -> tuple[str, str]:
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            raise _Untranslatable(type(node).__name__)
        return method(node)

    def visit_Expression(self, node: ast.Expression) -> tuple[str, str]:
        return self.visit(node.body)

    def visit_Constant(self, node: ast.Constant) -> tuple[str, str]:
        v = node.value
        if isinstance(v, bool):
            return ("1" if v else "0"), ("1" if v else "0")
        if isinstance(v, int):
            if abs(v) > 2 ** 53:
                raise _Untranslatable("large integer")
            return str(v), str(v)
        if isinstance(v, float) and math.isfinite(v):
            text = repr(v)
            if "e" in text or "E" in text:
                raise _Untranslatable("float in exponent notation")
            return text, text
        raise _Untranslatable("constant")

    def visit_Name(self, node: ast.Name) -> tuple[str, str]:
        if node.id not in self.params:
            raise _Untranslatable(f"name {node.id}")
        if node.id not in self.used:
            self.used.append(node.id)
        return node.id, node.id

    def visit_BinOp(self, node: ast.BinOp) -> tuple[str, str]:
        if isinstance(node.op, ast.Pow):
            if not (isinstance(node.right, ast.Constant) and isinstance(node.right.value, int)
                    and not isinstance(node.right.value, bool) and 0 <= node.right.value <= 8):
                raise _Untranslatable("power")
            n = node.right.value
            if n == 0:
                return "1", "1"
            kt, py = self.visit(node.left)
            return ("(" + " * ".join([f"({kt})"] * n) + ")",
                    "(" + " * ".join([f"({py})"] * n) + ")")
        left_kt, left_py = self.visit(node.left)
        right_kt, right_py = self.visit(node.right)
        if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}[type(node.op)]
            return f"({left_kt} {op} {right_kt})", f"({left_py} {op} {right_py})"
        if isinstance(node.op, (ast.Div, ast.FloorDiv)):
            return f"({left_kt} / {right_kt})", f"_div({left_py}, {right_py})"
        if isinstance(node.op, ast.Mod):
            return f"({left_kt} % {right_kt})", f"_rem({left_py}, {right_py})"
        raise _Untranslatable(type(node.op).__name__)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> tuple[str, str]:
        kt, py = self.visit(node.operand)
        if isinstance(node.op, ast.USub):
            return f"(-{kt})", f"(-{py})"
        if isinstance(node.op, ast.UAdd):
            return kt, py
        if isinstance(node.op, ast.Not):
            return f"(!{kt})", f"(1 if ({py}) == 0 else 0)"
        raise _Untranslatable(type(node.op).__name__)

    def visit_BoolOp(self, node: ast.BoolOp) -> tuple[str, str]:
        parts = [self.visit(v) for v in node.values]
        kt_op, py_fn = ("&&", "_and") if isinstance(node.op, ast.And) else ("||", "_or")
        return ("(" + f" {kt_op} ".join(p[0] for p in parts) + ")",
                f"{py_fn}(" + ", ".join(p[1] for p in parts) + ")")

    def visit_Compare(self, node: ast.Compare) -> tuple[str, str]:
        left = self.visit(node.left)
        kt_terms, py_terms = [], []
        for at, (op, comparator) in enumerate(zip(node.ops, node.comparators)):
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(comparator, (ast.Tuple, ast.List, ast.Set)) or \
                        not comparator.elts or at != len(node.ops) - 1:
                    raise _Untranslatable("in")
                items = [self.visit(e) for e in comparator.elts]
                kt = "(" + " || ".join(f"{left[0]} == {i[0]}" for i in items) + ")"
                py = "_or(" + ", ".join(f"(1 if {left[1]} == {i[1]} else 0)" for i in items) + ")"
                if isinstance(op, ast.NotIn):
                    kt, py = f"(!{kt})", f"(1 if {py} == 0 else 0)"
                kt_terms.append(kt)
                py_terms.append(py)
                continue
            if type(op) not in _COMPARE:
                raise _Untranslatable(type(op).__name__)
            right = self.visit(comparator)
            sign = _COMPARE[type(op)]
            kt_terms.append(f"({left[0]} {sign} {right[0]})")
            py_terms.append(f"(1 if {left[1]} {sign} {right[1]} else 0)")
            left = right
        if len(kt_terms) == 1:
            return kt_terms[0], py_terms[0]
        return "(" + " && ".join(kt_terms) + ")", "_and(" + ", ".join(py_terms) + ")"

    def visit_IfExp(self, node: ast.IfExp) -> tuple[str, str]:
        test, body, orelse = self.visit(node.test), self.visit(node.body), self.visit(node.orelse)
        return (f"({test[0]} ? {body[0]} : {orelse[0]})",
                f"(({body[1]}) if ({test[1]}) != 0 else ({orelse[1]}))")

    def visit_Call(self, node: ast.Call) -> tuple[str, str]:
        if not isinstance(node.func, ast.Name) or node.func.id not in ("min", "max") or \
                node.keywords or len(node.args) < 2:
            raise _Untranslatable("call")
        args = [self.visit(a) for a in node.args]
        kt, py = args[0]
        for a in args[1:]:
            kt = f"{node.func.id}({kt}, {a[0]})"
            py = f"{node.func.id}({py}, {a[1]})"
        return kt, py


def _names_in(text: str, params: Sequence[str]) -> list[str]:
    """The params a restriction string names, in param order (Kernel Tuner's own token rule)."""
    tokens = set(re.split(r"([a-zA-Z0-9_]+)", text))
    return [p for p in params if p in tokens]


def kt_eval_string(text: str, config: dict[str, Any]) -> bool:
    """A restriction string evaluated the way Kernel Tuner does: each param token replaced by
    its value, then Python's eval."""
    replaced = "".join(str(config[part]) if part in config else part
                       for part in re.split(r"([a-zA-Z0-9_]+)", text))
    return bool(eval(replaced, {"__builtins__": {}, "min": min, "max": max}))  # noqa: S307


def translate(text: str, params: Sequence[str]) -> Optional[tuple[str, Callable[..., Any], list[str]]]:
    """(ktune expression, its evaluation in Python with ktune's semantics taking the used params
    as keyword arguments, the used params) for a restriction string, or None when its syntax is
    outside the subset. Whether it admits the same configs is not checked here."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None
    translator = _Translator(params)
    try:
        kt, py = translator.visit(tree)
    except _Untranslatable:
        return None
    used = [p for p in params if p in translator.used]
    fn = eval(f"lambda {', '.join(used)}: {py}", dict(_HELPERS))  # noqa: S307 (generated text)
    return kt, fn, used


class Restriction:
    """One Kernel Tuner restriction: `admits(config)` decides as Kernel Tuner does; `params`
    are those it depends on (all of them for a plain callable); `source` describes it."""

    def __init__(self, admits: Callable[[dict[str, Any]], bool], params: list[str], source: str,
                 text: Optional[str] = None) -> None:
        self.admits = admits
        self.params = params
        self.source = source
        self.text = text


def parse_restrictions(restrictions: Any, tune_params: dict[str, list[Any]]) -> list[Restriction]:
    """Kernel Tuner's `restrictions` argument as a list of Restriction. Errors (NotSupported):
    a kind Kernel Tuner takes that this module does not (python-constraint objects)."""
    names = list(tune_params)
    if restrictions is None:
        return []
    if callable(restrictions) and not isinstance(restrictions, (list, tuple)):
        fn = restrictions
        check_signature(fn, "restrictions", [], dict_argument=True)
        return [Restriction(lambda c, fn=fn: bool(fn(dict(c))), names, _describe(fn))]
    if isinstance(restrictions, str):
        restrictions = [restrictions]
    out = []
    for i, r in enumerate(restrictions):
        if isinstance(r, str):
            out.append(Restriction(lambda c, r=r: kt_eval_string(r, c), _names_in(r, names),
                                   repr(r), text=r))
        elif isinstance(r, tuple) and len(r) == 2 and callable(r[0]) and \
                isinstance(r[1], (list, tuple)):
            fn, used = r
            unknown = [u for u in used if u not in tune_params]
            if unknown:
                raise NotSupported("not_supported",
                                   f"restrictions[{i}] names {unknown}, which are not tune_params")
            check_signature(fn, f"restrictions[{i}]", list(used))
            out.append(Restriction(lambda c, fn=fn, used=tuple(used):
                                   bool(fn(**{u: c[u] for u in used})),
                                   [n for n in names if n in used], _describe(fn)))
        elif callable(r):
            check_signature(r, f"restrictions[{i}]", names)
            out.append(Restriction(lambda c, fn=r: bool(fn(**c)), names, _describe(r)))
        else:
            raise NotSupported("not_supported",
                               f"restrictions[{i}]: {type(r).__name__} is not supported (expected "
                               "a string, a callable or a (callable, [param names]) tuple)")
    return out


def check_signature(fn: Callable[..., Any], what: str, names: list[str],
                    dict_argument: bool = False) -> None:
    """TypeError naming `what` and the fix when `fn` cannot be called as Kernel Tuner calls a
    restriction: with the config's dict (`dict_argument`), else with `names` as keywords."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C function: its call says
    described = _describe(fn)
    if dict_argument:
        try:
            signature.bind({})
        except TypeError as e:
            raise TypeError(f"{what}: {described}{signature} cannot be called with the config's "
                            f"dict ({e}) (fix: a function of one argument, e.g. "
                            "lambda p: p['block_size_x'] <= 256, or a list of restrictions)"
                            ) from None
        return
    try:
        signature.bind(**{n: 0 for n in names})
    except TypeError as e:
        example = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise TypeError(f"{what}: {described}{signature} cannot be called with the tunable "
                        f"parameters {names} as keywords ({e}) (fix: name every parameter, "
                        f"e.g. lambda {example}: ..., add **rest for the ones it does not use, "
                        "or pass (function, [names]))") from None


def max_threads_restriction(tune_params: dict[str, list[Any]],
                            max_threads: int = MAX_THREADS) -> Optional[str]:
    """Kernel Tuner's implicit restriction on the default block size names, as text."""
    used = [n for n in DEFAULT_BLOCK_SIZE_NAMES if n in tune_params]
    if not used:
        return None
    return " * ".join(used) + f" <= {max_threads}"


def _describe(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _product(tune_params: dict[str, list[Any]], names: Sequence[str]) -> Iterable[tuple]:
    return itertools.product(*(tune_params[n] for n in names))


def admitted_configs(tune_params: dict[str, list[Any]], restrictions: list[Restriction],
                     max_threads: Optional[int] = MAX_THREADS) -> list[tuple]:
    """Every config Kernel Tuner admits, as value tuples in tune_params order (the product's
    order)."""
    names = list(tune_params)
    checks = list(restrictions)
    limit = max_threads_restriction(tune_params, max_threads) if max_threads else None
    if limit:
        checks.append(Restriction(lambda c, t=limit: kt_eval_string(t, c), [], limit, limit))
    out = []
    for values in _product(tune_params, names):
        config = dict(zip(names, values))
        if all(r.admits(config) for r in checks):
            out.append(values)
    return out


def translated_constraint(restriction: Restriction, tune_params: dict[str, list[Any]]
                          ) -> Optional[str]:
    """The ktune expression of a string restriction when it admits exactly what Kernel Tuner
    admits on every combination of the params it names; None otherwise."""
    if restriction.text is None:
        return None
    names = list(tune_params)
    translated = translate(restriction.text, names)
    if translated is None:
        return None
    kt, fn, used = translated
    if set(used) != set(restriction.params):
        return None
    for values in _product(tune_params, used):
        config = dict(zip(used, values))
        try:
            ours = fn(**config) != 0
        except (ZeroDivisionError, OverflowError, TypeError, ValueError):
            return None
        if ours != restriction.admits(config):
            return None
    return kt


def diagram(names: Sequence[str], domains: Sequence[Sequence[int]], admitted: set[tuple]) -> str:
    """A ktune expression over `names` that is 1 exactly on the value tuples in `admitted` (of
    the product of `domains`): nested tests, a param skipped where its values do not matter,
    identical branches written once per test. NotSupported past MAX_DIAGRAM_CHARS."""
    memo: dict[tuple[int, frozenset], str] = {}
    sizes = [1] * (len(domains) + 1)
    for i in range(len(domains) - 1, -1, -1):
        sizes[i] = sizes[i + 1] * len(domains[i])

    def node(level: int, subset: frozenset) -> str:
        if not subset:
            return "0"
        if len(subset) == sizes[level]:
            return "1"
        key = (level, subset)
        if key in memo:
            return memo[key]
        groups: dict[Any, set] = {}
        for t in subset:
            groups.setdefault(t[0], set()).add(t[1:])
        children: dict[str, list[Any]] = {}
        for v in domains[level]:
            children.setdefault(node(level + 1, frozenset(groups.get(v, ()))), []).append(v)
        if len(children) == 1:
            text = next(iter(children))
        else:
            name = names[level]
            ordered = sorted(children.items(), key=lambda kv: (kv[0] == "0", len(kv[1])))
            text = ordered[-1][0]
            for child, values in reversed(ordered[:-1]):
                test = " || ".join(f"{name} == {v}" for v in values)
                text = f"(({test}) ? {child} : {text})"
        if len(text) > MAX_DIAGRAM_CHARS:
            raise NotSupported("not_supported", "a restriction evaluated in the client admits a "
                               f"set that takes more than {MAX_DIAGRAM_CHARS} characters to write "
                               "as a ktune constraint (fix: write it as a string in ktune's "
                               "expression subset, docs/kernel-tuner.md)")
        memo[key] = text
        return text

    return node(0, frozenset(admitted))


def restriction_constraint(restriction: Restriction, tune_params: dict[str, list[Any]],
                           coded: Optional[Sequence[str]] = None) -> str:
    """The ktune constraint that admits what `restriction` admits: its translation when that is
    exact, else the diagram of what it admits on the product of its params. Params in `coded`
    (non-integer values) are written as their value's index in tune_params, as ktune tunes
    them; a restriction over one is always decided here, on the values."""
    coded = set(coded or ())
    names = restriction.params or list(tune_params)
    if not coded.intersection(names):
        translated = translated_constraint(restriction, tune_params)
        if translated is not None:
            return translated
    admitted = set()
    positions = [range(len(tune_params[n])) for n in names]
    for index in itertools.product(*positions):
        values = tuple(tune_params[n][i] for n, i in zip(names, index))
        config = dict(zip(names, values))
        if restriction.params != list(tune_params):
            for other in tune_params:
                config.setdefault(other, tune_params[other][0])
        if restriction.admits(config):
            admitted.add(tuple(i if n in coded else v for n, i, v in zip(names, index, values)))
    return diagram(names, [list(range(len(tune_params[n]))) if n in coded else tune_params[n]
                           for n in names], admitted)
