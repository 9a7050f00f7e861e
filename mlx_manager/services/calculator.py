"""The playground's calculator: arithmetic on numbers, nothing else.

Expressions come from a model, so they are untrusted. They are parsed with `ast.parse` and
walked over a whitelist: numbers, + - * / // % **, unary + and -, and a few names and
functions from `math`. General evaluators (simpleeval, asteval) were considered and not used:
they exist to run a subset of Python (attributes, subscripts, comprehensions, strings) and
have to be configured down to arithmetic; a whitelist that starts at arithmetic is a smaller
attack surface, and every allowed node fits on one screen.

Resource use is bounded: the input length, the size of `**` results (estimated before they
are computed), the digits of every integer, and floats must stay finite.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

MAX_EXPRESSION_LENGTH = 500
# Below Python's own int->str limit (4300 digits), so every accepted result can be printed.
MAX_INTEGER_DIGITS = 4000
# round(x, n) computes 10**n: n stays in the range the digit limit allows anyway.
MAX_ROUND_DIGITS = MAX_INTEGER_DIGITS

Number = int | float


class CalculatorError(ValueError):
    """The expression cannot be evaluated; the message says why, for the model to read."""


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or abs(ndigits) > MAX_ROUND_DIGITS:
        raise CalculatorError(
            f"round(): digits must be a whole number between -{MAX_ROUND_DIGITS} and {MAX_ROUND_DIGITS}"
        )
    return round(x, ndigits)


def _log(x: Number, base: Number | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


# name -> (implementation, fewest arguments, most arguments or None for any number)
FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int | None]] = {
    "sqrt": (math.sqrt, 1, 1),
    "sin": (math.sin, 1, 1),
    "cos": (math.cos, 1, 1),
    "tan": (math.tan, 1, 1),
    "asin": (math.asin, 1, 1),
    "acos": (math.acos, 1, 1),
    "atan": (math.atan, 1, 1),
    "log": (_log, 1, 2),
    "log10": (math.log10, 1, 1),
    "exp": (math.exp, 1, 1),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "fabs": (math.fabs, 1, 1),
    "abs": (abs, 1, 1),
    "round": (_round, 1, 2),
    "min": (lambda *args: min(args), 1, None),
    "max": (lambda *args: max(args), 1, None),
}
ALLOWED = "numbers, + - * / // % **, parentheses, " + ", ".join([*CONSTANTS, *FUNCTIONS])


def _checked(value: Any) -> Number:
    """Every intermediate result passes here: real, finite, and of printable size."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is too large (overflow)")
    if isinstance(value, int) and value.bit_length() * math.log10(2) > MAX_INTEGER_DIGITS:
        raise CalculatorError(f"the result has more than {MAX_INTEGER_DIGITS} digits")
    return value


def _power(base: Number, exponent: Number) -> Number:
    if abs(base) > 1 and exponent > 0:
        digits = float(exponent) * math.log10(abs(base))
        if digits > MAX_INTEGER_DIGITS:
            raise CalculatorError(
                f"the result of ** would have about {digits:.3g} digits (limit {MAX_INTEGER_DIGITS})"
            )
    return _checked(base**exponent)


def _call(node: ast.Call) -> Number:
    if not isinstance(node.func, ast.Name):
        raise CalculatorError("only the listed functions can be called, by name")
    name = node.func.id
    if name not in FUNCTIONS:
        raise CalculatorError(f"unknown function {name!r}; available: {', '.join(FUNCTIONS)}")
    if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
        raise CalculatorError(f"{name}() takes plain positional arguments only")
    function, fewest, most = FUNCTIONS[name]
    if len(node.args) < fewest or (most is not None and len(node.args) > most):
        expected = (
            f"{fewest} or more" if most is None else str(fewest) if fewest == most else f"{fewest} or {most}"
        )
        raise CalculatorError(f"{name}() takes {expected} argument(s), got {len(node.args)}")
    return _checked(function(*(_evaluate(arg) for arg in node.args)))


def _evaluate(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"{node.value!r} is not a number; only numbers are allowed")
        return _checked(node.value)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        if type(node.op) not in _BINARY:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed; allowed: {ALLOWED}")
        return _checked(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_evaluate(node.operand)))
    if isinstance(node, ast.Name):
        if node.id not in CONSTANTS:
            raise CalculatorError(f"unknown name {node.id!r}; available constants: {', '.join(CONSTANTS)}")
        return CONSTANTS[node.id]
    if isinstance(node, ast.Call):
        return _call(node)
    raise CalculatorError(f"{type(node).__name__} is not allowed; allowed: {ALLOWED}")


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression; `CalculatorError` says what is wrong with it."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    if not expression.strip():
        raise CalculatorError("the expression is empty")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        raise CalculatorError(f"syntax error{where}: {exc.msg}") from None
    except (ValueError, MemoryError, RecursionError) as exc:
        raise CalculatorError(f"the expression cannot be parsed ({exc})") from None
    try:
        return _evaluate(tree.body)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large (overflow)") from None
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None
    except CalculatorError:
        raise
    except (ValueError, TypeError) as exc:
        # math raises ValueError("math domain error") for sqrt(-1), log(0), asin(2)...
        raise CalculatorError(str(exc)) from None


def format_number(value: Number) -> str:
    """Integers exactly; floats to 15 significant digits, so 0.1 + 0.2 reads 0.3 and sqrt(4) reads 2."""
    if isinstance(value, int):
        return str(value)
    text = f"{value:.15g}"
    return "0" if text == "-0" else text
