"""The house's floors: config/ sits below the code it configures, every import points down, each check is
registered beside its code and named in the one place that orders them (rft/trainer/validate.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rft"

LAYERS = [
    # bottom first; a package or top-level module may import only those before it
    "errors", "registry", "interrupts", "fsutil", "retry", "runtime", "console", "userfile", "example_files", "batch", "distributed",
    "config", "dialects", "data", "experience", "models", "algorithms", "monitor", "rewards", "workers",
    "rollout", "sync", "buffer", "data_processor", "explorer", "tasks", "trainer", "orchestration", "offline", "components",
    "studio", "cli",
    "__main__",
]
ABOVE_CONFIG = ("orchestration", "trainer", "explorer", "rollout", "rewards", "workers", "buffer", "sync", "models")


def _imports(path: Path) -> list[tuple[str, int]]:
    """(rft module imported, line) for every import in the file, at module level or inside a function."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.rsplit(".", 1)[0] + "._"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: -node.level]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "rft":  # `from rft import interrupts`: the modules named
                out += [(f"rft.{a.name}", node.lineno) for a in node.names]
            else:
                out.append((module, node.lineno))
    return [(m, line) for m, line in out if m == "rft" or m.startswith("rft.")]


def _unit(module: str) -> str:
    """The package or top-level module of rft that `module` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "rft"


def _files():
    return sorted(SRC.rglob("*.py"))


def test_config_imports_none_of_the_code_it_configures():
    offenders = []
    for path in sorted((SRC / "config").glob("*.py")):
        for module, line in _imports(path):
            if _unit(module) not in ("config", "errors", "registry"):
                offenders.append(f"config/{path.name}:{line} imports {module}")
    assert offenders == []


def test_every_import_points_down():
    """No lower layer imports a higher one (hence no circle), counting imports inside functions too."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    units = {p.relative_to(SRC).parts[0].removesuffix(".py") for p in _files()} - {"__init__"}
    assert units <= set(rank), f"place {sorted(units - set(rank))} in LAYERS"
    upward = []
    for path in _files():
        rel = path.relative_to(SRC)
        here = rel.parts[0].removesuffix(".py")
        if here == "__init__":
            continue
        for module, line in _imports(path):
            there = _unit(module)
            if there == "rft":
                continue  # the package itself: its __init__ holds the version only
            if there != here and rank[there] > rank[here]:
                upward.append(f"{rel}:{line} ({here}) imports {module} ({there})")
    assert upward == []


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _module_graph() -> dict[str, set[str]]:
    """rft's modules, each with the rft modules it imports, at module level or inside a function. `from pkg import x`
    is an import of pkg.x where x is a module; an import of a name in a package is one of the package (its
    __init__)."""
    modules = {_module_name(p): p for p in _files()}
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        named = {}  # module -> the names imported from it, to tell submodules apart
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                named.setdefault(node.lineno, [a.name for a in node.names])
        deps = set()
        for module, line in _imports(path):
            found = [f"{module}.{n}" for n in named.get(line, []) if f"{module}.{n}" in modules]
            if not found or len(found) < len(named.get(line, [])):
                while module not in modules:  # `import rft.x.y.Name` or a name of a module
                    module = module.rsplit(".", 1)[0]
                found.append(module)
            deps |= set(found) - {name}
        graph[name] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_module_imports_itself_round_a_circle():
    """Within a package too, no module reaches itself through the modules it imports, counting imports inside
    functions (which only hide a circle: the two modules still cannot be understood, or moved, apart)."""
    assert _circles(_module_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_the_root_package_imports_nothing_of_rft():
    assert _imports(SRC / "__init__.py") == []


def _orders():
    from rft.trainer import validate

    runs = {name: getattr(validate, name) for name in ("RL", "SFT", "DPO", "RM", "GENERATE", "EVAL")}
    return runs, validate.UNUSED_RL


def test_every_registered_check_runs_somewhere_and_is_its_owners():
    from rft.config.checks import CHECKS, UNUSED

    runs, unused = _orders()
    named = {name for order in runs.values() for name in order}
    assert set(CHECKS.names()) == named, "a check registered but run by no command, or named but not registered"
    assert set(UNUSED.names()) == set(unused)
    for order in runs.values():
        assert len(order) == len(set(order)), order
    for registry in (CHECKS, UNUSED):
        for name in registry.names():
            owner = name.split(".")[0]
            module = registry.get(name).__module__
            assert _unit(module) == owner, f"{name} is registered by {module}, not by {owner}/"


def test_a_check_named_twice_or_unknown_is_refused():
    from rft.config.checks import CHECKS, CheckContext, run_checks

    with pytest.raises(KeyError, match="unknown config check 'rollout.nothing'; valid: .*rollout.engine"):
        run_checks(["rollout.nothing"], CheckContext(cfg=None))
    with pytest.raises(ValueError, match="registered twice"):
        CHECKS.register("rollout.engine")(lambda ctx: None)


def test_validation_runs_the_declared_order(monkeypatch):
    """validate() is the list: each named check runs once, in the order RL declares."""
    from rft.config import checks
    from rft.config.schema import RFTConfig
    from rft.trainer import validate

    seen = []
    for name in validate.RL:
        monkeypatch.setitem(checks.CHECKS._items, name, lambda ctx, name=name: seen.append(name))
    validate.validate(RFTConfig(), check_paths=False)
    assert seen == list(validate.RL)


@pytest.mark.parametrize("module", ["rft.config", "rft.config.checks", "rft.config.validate", "rft.dialects.trinity"])
def test_the_schema_and_the_dialects_load_without_the_subsystems(module):
    """config/ and the dialects import without torch or any subsystem (run in a fresh interpreter)."""
    import subprocess
    import sys

    code = (f"import sys; import {module}; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or m.split('.')[:2] in "
            f"[['rft', p] for p in {list(ABOVE_CONFIG)!r}]); print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
