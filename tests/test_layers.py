"""Imports run one way (docs/architecture.md, CONVENTIONS 16).

Read as a newcomer reads them: every non-test module of ``orchestrator/`` and ``recipes/`` is
parsed with ``ast`` and every import of the project's own modules counts, function-local and
``TYPE_CHECKING`` ones included. The project's modules form no import cycle; a function-local
import of one of them is there for start-up cost only and says so in a comment; every module
has its place in the ``layers`` contract of ``pyproject.toml``, which ``lint-imports`` checks.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.require import need_module

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "recipes")
# what a function-local import's comment must say (same line, or the line above)
STARTUP = re.compile(r"start-?up", re.IGNORECASE)
# Function-local imports allowed for now although neither for start-up cost nor hiding a cycle
# (none left): hoist them to the top and drop the entry; a stale entry fails the test.
NOT_YET_HOISTED: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the project module imported
    line: int
    local: bool  # inside a function


def project_modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if not all((d / "__init__.py").exists()
                       for d in path.parents if d.is_relative_to(ROOT / pkg)):
                continue  # a standalone script (recipes/examples), not a module
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (``a.b.c`` -> ``a.b`` when c is a name)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, mods: dict[str, Path]) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[Import] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in child.names]
            for name in names:
                if name.split(".")[0] not in PACKAGES:
                    continue
                target = _resolve(name, mods)
                if target is not None and target != module:
                    out.append(Import(module, target, child.lineno, local))
            visit(child, inner)

    visit(tree, False)
    return out


def all_imports() -> list[Import]:
    mods = project_modules()
    return [imp for m, p in mods.items() for imp in imports_of(m, p, mods)]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_cycle_finder_on_a_small_graph() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


def test_no_import_cycle_among_project_modules() -> None:
    edges: dict[str, set[str]] = {}
    for imp in all_imports():
        edges.setdefault(imp.module, set()).add(imp.target)
    found = cycles(edges)
    assert not found, "import cycles (function-local imports included):\n" + "\n".join(
        f"{len(c)} modules: {', '.join(c)}" for c in found)


def _comments(path: Path) -> dict[int, str]:
    out: dict[int, str] = {}
    with open(path, "rb") as fh:
        for tok in tokenize.tokenize(fh.readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string
    return out


def test_function_local_imports_are_for_start_up_cost_and_say_so() -> None:
    """A function-local import of the project's own modules carries a one-line comment on its
    line or the line above naming start-up cost (a block of such imports under one comment
    counts as one)."""
    mods = project_modules()
    unexplained = []
    exempt_seen = set()
    for imp in all_imports():
        if not imp.local:
            continue
        path = mods[imp.module]
        key = (str(path.relative_to(ROOT)), imp.target)
        if key in NOT_YET_HOISTED:
            exempt_seen.add(key)
            continue
        comments = _comments(path)
        lines = path.read_text(encoding="utf-8").splitlines()
        line = imp.line
        ok = STARTUP.search(comments.get(line, "")) is not None
        while not ok and line > 1:
            above = lines[line - 2].strip()
            if STARTUP.search(comments.get(line - 1, "")):
                ok = True
            elif above.startswith(("from ", "import ")) and not above.startswith("from __future"):
                line -= 1  # one comment above a block of imports covers the block
                continue
            break
        if not ok:
            unexplained.append(f"{path.relative_to(ROOT)}:{imp.line} imports {imp.target}")
    assert not unexplained, ("function-local imports without a start-up comment:\n"
                             + "\n".join(sorted(set(unexplained))))
    assert exempt_seen == NOT_YET_HOISTED, f"stale entries: {NOT_YET_HOISTED - exempt_seen}"


def _layers() -> list[list[str]]:
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = data["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    assert {c["type"] for c in contracts} >= {"layers", "independence"}
    return [[m.strip().strip("()") for m in re.split(r"[|:]", entry)] for entry in layers]


def test_every_module_has_its_layer() -> None:
    """The layers contract names every module (a package entry covers its descendants), so a
    new module cannot escape the check by being left out."""
    mods = project_modules()
    entries = {m: i for i, layer in enumerate(_layers()) for m in layer}
    unknown = sorted(m for m in entries if m not in mods)
    assert not unknown, f"the layers contract names modules that do not exist: {unknown}"
    importing = {imp.module for imp in all_imports()}
    missing, doubled = [], []
    for m in mods:
        owners = {e for e in entries if m == e or m.startswith(e + ".")}
        if len(owners) > 1:
            doubled.append(f"{m}: {sorted(owners)}")
        if not owners and (m in importing or not mods[m].name == "__init__.py"):
            missing.append(m)
    assert not missing, f"modules without a layer in pyproject.toml: {missing}"
    assert not doubled, f"modules in more than one layer entry: {doubled}"


def test_lint_imports_passes() -> None:
    need_module("importlinter", "pip install import-linter (the dev extra)")
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "importlinter.cli"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([*cmd, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]


@pytest.mark.parametrize(("module", "banned"), [
    # the trial worker's fixed cost stays close to `import torch`
    ("orchestrator.worker.trial", ("pandas", "matplotlib", "hydra", "omegaconf", "submitit")),
    ("orchestrator.worker.probe", ("pandas", "matplotlib", "hydra", "omegaconf",
                                        "submitit")),
    # `orchestrator --help` and the pre-flight's one-line errors stay fast
    ("orchestrator.cli.main", ("torch", "pandas", "matplotlib", "hydra", "submitit")),
])
def test_entry_modules_import_no_heavy_packages(module: str, banned: tuple[str, ...]) -> None:
    code = (f"import sys, {module}; "
            f"print(' '.join(m for m in {banned!r} if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"importing {module} imports {out.stdout.strip()}"


def test_imports_of_reads_local_and_relative_imports(tmp_path: Path) -> None:
    src = ("from orchestrator.core import stats\n"
           "def f():\n"
           "    # start-up cost\n"
           "    from orchestrator.core.stats import median\n"
           "    return median\n")
    path = tmp_path / "m.py"
    path.write_text(src)
    mods = {"orchestrator.x": path, "orchestrator.core.stats": path, "orchestrator": path}
    found = imports_of("orchestrator.x", path, mods)
    assert [(i.target, i.line, i.local) for i in found] == [
        ("orchestrator.core.stats", 1, False), ("orchestrator.core.stats", 4, True)]
    assert STARTUP.search(_comments(path)[3])


def test_comment_reader_is_not_fooled_by_strings() -> None:
    toks = list(tokenize.tokenize(io.BytesIO(b"x = '# start-up'\n").readline))
    assert not any(t.type == tokenize.COMMENT for t in toks)


def _architecture_table() -> list[tuple[str, set[str]]]:
    rows = []
    for line in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0] != "package":
            rows.append((cells[0].strip("`"), set(re.findall(r"`([\w/]+)`", cells[2]))))
    return rows


def test_the_architecture_table_lists_the_layers_and_their_modules() -> None:
    """docs/architecture.md's table: one row per layer package, in the contract's order, each
    naming exactly the modules on disk (a module added, moved or removed fails this test)."""
    rows = _architecture_table()
    packages = [layer[0] for layer in _layers() if layer[0].startswith("orchestrator.")]
    assert [r[0] for r in rows] == [p.split(".")[1] for p in packages]
    for pkg, named in rows:
        base = ROOT / "orchestrator" / pkg
        on_disk = {str(p.relative_to(base).with_suffix("")) for p in base.rglob("*.py")
                   if p.name != "__init__.py" and "__pycache__" not in p.parts}
        assert named >= on_disk and not (named - on_disk - _NOT_MODULES), (
            pkg, sorted(on_disk - named), sorted(named - on_disk - _NOT_MODULES))


# names in the table's 'holds' column that are classes, not modules
_NOT_MODULES = {"Launcher", "TrialSpec", "ProbeSpec"}


def test_no_function_in_the_coordinators_is_over_60_lines() -> None:
    """campaign/ and worker/ read top to bottom: small named steps, state in small objects."""
    long = []
    for pkg in ("campaign", "worker"):
        for path in sorted((ROOT / "orchestrator" / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = (node.end_lineno or node.lineno) - node.lineno + 1
                    if n > 60:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n})")
    assert not long, long


def test_no_module_imports_another_modules_private_name() -> None:
    """A name with a leading underscore stays in its module (a module may be private, as
    core/_watchdog, which runs as a script, and cli/tools/_cli)."""
    bad = []
    mods = project_modules()  # once: it walks the tree
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
                for a in node.names:
                    target = f"{node.module}.{a.name}"
                    is_module = target in mods
                    if a.name.startswith("_") and not a.name.startswith("__") and not is_module:
                        bad.append(f"{mod} imports {target}")
    assert not bad, bad


def test_nothing_outside_the_recipes_imports_a_specific_recipe() -> None:
    """The orchestrator reaches a recipe through the recipe API only (recipes.base, the
    registry, the hooks of its schema: WorkloadConfig.check_arms, attention_refusal ...), so a
    new recipe is one folder, and the campaign never tests for a recipe's type."""
    allowed = {"recipes", "recipes.base", "recipes.registry"}
    bad = [f"{imp.module} imports {imp.target}" for imp in all_imports()
           if imp.module.startswith("orchestrator")
           and imp.target.split(".")[0] == "recipes" and imp.target not in allowed]
    assert not bad, bad
