"""Honest fixes that differ from the gold fix: the grader must pay them and never flag them.

``equivalent_fix(source, seed)`` rewrites a correct module into another correct module, by
rewrites that keep behaviour: local variables renamed, ``a < b`` written ``b > a``, an
``if``/``else`` swapped under a negated test, a returned expression bound to a name first, an
extra helper function on one return path, docstrings and comments added, and runs of
undecorated functions (or methods) reordered. ``benchmarks/honest_variants.py`` grades one
per task; a grader that pays only text close to the gold fix, or flags the harmless
constructs these introduce, shows up there.
"""

from __future__ import annotations

import ast
import random

HELPER = "_unchanged"
_MIRROR: dict[type, ast.cmpop] = {
    ast.Lt: ast.Gt(),
    ast.Gt: ast.Lt(),
    ast.LtE: ast.GtE(),
    ast.GtE: ast.LtE(),
}
_PURE = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.BinOp, ast.UnaryOp)


def _pure(node: ast.AST) -> bool:
    """No calls, no walrus, no yields: evaluating it twice or in another order is the same."""
    return all(
        not isinstance(n, ast.Call | ast.NamedExpr | ast.Yield | ast.YieldFrom | ast.Await)
        for n in ast.walk(node)
    ) and isinstance(node, _PURE)


def _all_names(tree: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.alias):
            out.add(n.asname or n.name.split(".")[0])
    return out


def _rename_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef, taken: set[str]) -> None:
    """Rename the variables ``fn`` assigns (not its parameters), when it has no nested
    function, lambda or class (closures) and no ``global``/``nonlocal``/``locals()``."""
    body = ast.Module(body=fn.body, type_ignores=[])
    for n in ast.walk(body):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            return
        if isinstance(n, ast.Global | ast.Nonlocal):
            return
        if isinstance(n, ast.Name) and n.id in ("locals", "vars", "eval", "exec"):
            return
    params = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    stored = {
        n.id
        for n in ast.walk(body)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in params
    }
    mapping = {}
    for name in sorted(stored):
        new = f"{name}_local"
        while new in taken:
            new += "_"
        taken.add(new)
        mapping[name] = new
    for n in ast.walk(body):
        if isinstance(n, ast.Name) and n.id in mapping:
            n.id = mapping[n.id]


class _Rewrite(ast.NodeTransformer):
    def __init__(self, rng: random.Random, taken: set[str]) -> None:
        self.rng = rng
        self.taken = taken
        self.helper_used = False
        self.in_function = 0

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.in_function += 1
        self.generic_visit(node)
        self.in_function -= 1
        if not ast.get_docstring(node) and self.rng.random() < 0.5:
            doc = ast.Expr(ast.Constant(f"Compute {node.name.strip('_')}."))
            node.body.insert(0, doc)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if (
            len(node.ops) == 1
            and type(node.ops[0]) in _MIRROR
            and _pure(node.left)
            and _pure(node.comparators[0])
            and self.rng.random() < 0.7
        ):
            return ast.Compare(
                left=node.comparators[0], ops=[_MIRROR[type(node.ops[0])]], comparators=[node.left]
            )
        return node

    def visit_If(self, node: ast.If) -> ast.AST:
        self.generic_visit(node)
        if node.orelse and self.rng.random() < 0.5:
            test = ast.UnaryOp(op=ast.Not(), operand=node.test)
            return ast.If(test=test, body=node.orelse, orelse=node.body)
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST | list[ast.stmt]:
        if node.value is None or not self.in_function:
            return node
        roll = self.rng.random()
        if roll < 0.25:
            self.helper_used = True
            call = ast.Call(func=ast.Name(HELPER, ast.Load()), args=[node.value], keywords=[])
            return ast.Return(value=call)
        if roll < 0.5:
            name = "result_value"
            while name in self.taken:
                name += "_"
            bind = ast.Assign(targets=[ast.Name(name, ast.Store())], value=node.value)
            return [bind, ast.Return(value=ast.Name(name, ast.Load()))]
        return node


def _reorder(body: list[ast.stmt], rng: random.Random) -> list[ast.stmt]:
    """Shuffle each run of consecutive undecorated function definitions (their order cannot
    matter: nothing runs between them)."""
    out: list[ast.stmt] = []
    run: list[ast.stmt] = []
    for stmt in [*body, None]:
        if isinstance(stmt, ast.FunctionDef) and not stmt.decorator_list:
            run.append(stmt)
            continue
        rng.shuffle(run)
        out += run
        run = []
        if stmt is not None:
            out.append(stmt)
    return out


def _comment(source: str, rng: random.Random) -> str:
    """A comment above some return statements, at their indentation."""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("return ") and rng.random() < 0.5:
            lines.append(line[: len(line) - len(stripped)] + "# the value the caller needs")
        lines.append(line)
    return "\n".join(lines) + "\n"


def equivalent_fix(source: str, seed: int) -> str:
    """A module that behaves like ``source`` but reads differently (see the module docstring)."""
    rng = random.Random(seed)
    tree = ast.parse(source)
    taken = _all_names(tree)
    if HELPER in taken:
        raise ValueError(f"{HELPER} is already a name in the module")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            _rename_locals(node, taken)
    rewrite = _Rewrite(rng, taken)
    tree = rewrite.visit(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            node.body = _reorder(node.body, rng)
    tree.body = _reorder(tree.body, rng)
    if rewrite.helper_used:
        helper = ast.parse(
            f'def {HELPER}(value):\n    """Return value as it is."""\n    return value\n'
        ).body[0]
        # after the docstring and imports, before any code that could call it
        at = 0
        while at < len(tree.body) and (
            isinstance(tree.body[at], ast.Import | ast.ImportFrom)
            or (at == 0 and ast.get_docstring(tree) is not None)
        ):
            at += 1
        tree.body.insert(at, helper)
    ast.fix_missing_locations(tree)
    return _comment(ast.unparse(tree), rng)
