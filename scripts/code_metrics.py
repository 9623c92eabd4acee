"""The code-health figures issue 50 asks for, over orchestrator/ (stdlib only):

    python scripts/code_metrics.py [ROOT]

- ``dict[str, Any]`` annotations, and beside them the other spellings of an untyped record
  (``Mapping[str, Any]``, ``MutableMapping[str, Any]``, ``dict[str, object]``,
  ``Mapping[str, object]``), so that moving a record from one to another shows;
- ``TypedDict`` record types declared;
- status, verdict, pairing and trial-kind words compared as strings (``== "ok"``,
  ``in ("retain", ...)``, ``.kind == "timed"``) outside the record module's parsing;
- the largest modules, the longest functions, functions with more than 8 parameters.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

# each family's words, and what the other side of a comparison must name for it to be that
# family's word (a device kind "auto" or a speed reference's mode "auto" is not a pairing)
FAMILIES = {
    "status": ({"ok", "failed", "unavailable", "oom", "timeout", "crashed", "killed",
                "infra_failed", "skipped"}, re.compile(r"status")),
    "verdict": ({"retain", "reject", "equivalent", "inconclusive", "invalid"},
                re.compile(r"verdict")),
    "pairing": ({"process", "steps", "duet", "auto"}, re.compile(r"pairing")),
    "trial kind": ({"timed", "profile", "microbench", "pilot"}, re.compile(r"kind")),
}
WORDS = set().union(*(words for words, _ in FAMILIES.values()))
# the modules that parse those words from text (JSON, configs) into members
PARSING = {"orchestrator/core/records.py"}


def _words(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & WORDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        out: set[str] = set()
        for e in node.elts:
            out |= _words(e)
        return out
    return set()


def string_compares(tree: ast.AST) -> list[tuple[int, str]]:
    """Comparisons of a family's word with an expression that names the family
    (``rec.get("status") == "ok"``, ``p.pairing != "steps"``, ``t["kind"] == "pilot"``)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                    words = _words(right) | _words(node.left)
                    other = ast.unparse(node.left if _words(right) else right)
                    hit = {w for fam, (ws, subject) in FAMILIES.items() if subject.search(other)
                           for w in words & ws}
                    if hit:
                        out.append((node.lineno, ",".join(sorted(hit))))
    return out


def functions(tree: ast.AST) -> list[tuple[str, int, int, int]]:
    """(name, line, lines, parameters) of every function."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
            if a.args and a.args[0].arg in ("self", "cls"):
                n -= 1
            out.append((node.name, node.lineno, node.end_lineno - node.lineno + 1, n))
    return out


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    root = Path(args[0] if args else ".")
    files = sorted((root / "orchestrator").rglob("*.py"))
    anys = 0
    others = 0
    typed = 0
    compares: list[str] = []
    sizes: list[tuple[int, str]] = []
    funcs: list[tuple[int, str]] = []
    many: list[str] = []
    for f in files:
        rel = f.relative_to(root).as_posix()
        text = f.read_text()
        anys += len(re.findall(r"(?<![A-Za-z])dict\[str, Any\]", text))
        others += len(re.findall(r"(?:Mapping\[str, (?:Any|object)\]|dict\[str, object\])", text))
        typed += len(re.findall(r"\(TypedDict\b|\bTypedDict\(", text))
        sizes.append((len(text.splitlines()), rel))
        tree = ast.parse(text)
        if rel not in PARSING:
            compares += [f"{rel}:{ln} {w}" for ln, w in string_compares(tree)]
        for name, line, n_lines, n_params in functions(tree):
            funcs.append((n_lines, f"{rel}:{line} {name}"))
            if n_params > 8:
                many.append(f"{rel}:{line} {name} ({n_params})")
    sizes.sort(reverse=True)
    funcs.sort(reverse=True)
    print(f"dict[str, Any]: {anys}")
    print(f"other untyped records (Mapping[str, Any|object], dict[str, object]): {others}")
    print(f"TypedDict record types: {typed}")
    print(f"status/verdict/pairing/kind words compared as strings: {len(compares)}")
    print(f"largest modules: " + ", ".join(f"{p} ({n})" for n, p in sizes[:3]))
    print(f"modules over 700 lines: {sum(1 for n, _ in sizes if n > 700)}")
    print(f"longest functions: " + ", ".join(f"{p} ({n})" for n, p in funcs[:3]))
    print(f"functions over 80 lines: {sum(1 for n, _ in funcs if n > 80)}")
    print(f"functions with more than 8 parameters: {len(many)}")
    if "-v" in sys.argv:
        print("\n".join(["", *compares, "", *many]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
