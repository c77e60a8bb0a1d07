"""The package layout: no import cycle between the project's own modules.

Imports are read with ``ast`` (nothing is imported), at any depth: module level, inside
functions and under ``TYPE_CHECKING`` alike, so a lazy import cannot hide a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "train", "reports", "hydra_plugins", "study")


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of :data:`PACKAGES`."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names one import statement may load (a module, or a module's member)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        anchor = here[: len(here) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            candidates = _imported(node, name, is_package)
            if isinstance(node, ast.ImportFrom):
                members = [c for c in candidates[:-1] if c in modules]
                candidates = members or candidates[-1:]
            for target in candidates:
                while target and target not in modules:  # a member: its module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan), as a path
    ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path_back(graph, group) for group in groups]


def _path_back(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest cycle from the group's first module back to itself (breadth first)."""
    start = min(group)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in {group}")


def test_the_import_graph_sees_lazy_and_relative_imports():
    graph = import_graph()
    assert "reports.aggregate" in graph["reports.tables"]
    assert "harness.metrics" in graph["reports.aggregate"]  # ``from harness import metrics``
    assert "reports.report" in graph["reports.__main__"]  # imported inside ``main``
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycles_between_project_modules():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_harness_imports_no_later_stage():
    """Data flows harness -> train -> reports: the harness imports neither."""
    graph = import_graph()
    upward = {
        (module, target)
        for module, targets in graph.items()
        if module.startswith("harness")
        for target in targets
        if target.startswith(("train", "reports", "study"))
    }
    assert not upward, sorted(upward)
    assert "harness.files" in graph["harness.manifest"]  # the one digest of model keys


def test_the_study_runner_sits_above_the_harness_and_the_reports():
    """``study/`` drives the harness and the reports (a study's runs, then its folder);
    nothing of theirs imports it, and ``reports --check`` needs no engine."""
    graph = import_graph()
    upward = sorted(
        (module, target)
        for module, targets in graph.items()
        if not module.startswith("study")
        for target in targets
        if target == "study" or target.startswith("study.")
    )
    assert not upward, upward
    assert {"harness.provenance", "reports.study"} <= graph["study.runner"]
    assert not any(t.startswith("study") for t in graph["reports.study"])


# harness/ in the order data flows: a module imports only modules of its own layer or below
# (the backends sit below the config, which asks a job's backend for its rules)
LAYERS = (
    ("harness.errors", "harness.files", "harness.console", "harness.checks", "harness.schedule",
     "harness.metrics", "harness.manifest", "harness.records"),
    ("harness.speculators",),
    ("harness.backends",),
    ("harness.config", "harness.grid", "harness.results", "harness.provenance", "harness.tracking"),
    ("harness.data",),
    ("harness.calibration",),
    ("harness.measure",),
    ("harness.sweep",),
    ("harness.__main__",),
)  # fmt: skip


def layer(module: str) -> int | None:
    """The index in :data:`LAYERS` of a harness module (its package's, or its own)."""
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(f"{n}.") for n in names):
            return i
    return None


def test_every_harness_module_has_a_layer():
    graph = import_graph()
    unplaced = [m for m in graph if m.startswith("harness.") and layer(m) is None]
    assert not unplaced, unplaced


def test_harness_imports_point_down_its_layers():
    graph = import_graph()
    upward = sorted(
        (module, target)
        for module, targets in graph.items()
        if module.startswith("harness.")
        for target in targets
        if target.startswith("harness.") and layer(target) > layer(module)
    )
    assert not upward, upward
    assert (
        layer("harness.sweep.job")
        > layer("harness.data.datasets")
        > layer("harness.config")
        > layer("harness.backends.engine")
    )


def _backend_branches(path: Path) -> list[int]:
    """Lines of ``path`` that compare a config's ``backend``, a table's ``backend`` column or
    a backend's name."""

    def names_a_backend(side: ast.expr) -> bool:
        if isinstance(side, ast.Tuple | ast.List | ast.Set):  # ``in ("server", ...)``
            return any(names_a_backend(element) for element in side.elts)
        if isinstance(side, ast.Constant):
            return side.value in ("offline", "server")
        if isinstance(side, ast.Subscript):  # ``table["backend"]``
            return isinstance(side.slice, ast.Constant) and side.slice.value == "backend"
        return isinstance(side, ast.Attribute) and side.attr == "backend"

    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Compare)
        and any(names_a_backend(side) for side in (node.left, *node.comparators))
    ]


def test_only_the_backends_branch_on_the_backend():
    """A job's backend is asked (``harness.backends.of``), never compared with a name; a
    table's rows are told apart by what the backends package says of them (``STREAMED``)."""
    scripts = sorted((ROOT / "bench").glob("*.py"))  # the bench scripts ask the same way
    paths = [p for n, p in _modules().items() if not n.startswith("harness.backends")] + scripts
    found = [f"{p.relative_to(ROOT)}:{line}" for p in paths for line in _backend_branches(p)]
    assert not found, found
    assert _backend_branches(ROOT / "harness" / "backends" / "__init__.py")  # it sees them


def test_the_backend_names_are_the_backends_own():
    from harness import backends
    from harness.backends.offline import ENGINES
    from harness.backends.server import STARTED

    assert (ENGINES.name, STARTED.name) == backends.NAMES


def test_the_watchdog_module_runs_without_being_imported_twice():
    """``python -m harness.backends.reaper`` imports its package first: the package must not
    import the watchdog (runpy's warning would reach every job's output)."""
    import subprocess
    import sys

    command = [sys.executable, "-W", "error::RuntimeWarning", "-m", "harness.backends.reaper",
               "0", "no-such-token"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]


def test_one_module_expands_the_sweep_grid():
    """The jobs a multirun's overrides give are ``harness.grid``'s: no other module calls
    Hydra's ``split_arguments`` (the sweeper's own override of it aside)."""

    def calls(path: Path) -> list[int]:
        tree = ast.parse(path.read_text(), str(path))
        return [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "split_arguments"
        ]

    modules = _modules()
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for name, path in modules.items()
        if name != "harness.grid"
        for line in calls(path)
    ]
    assert not found, found
    assert calls(modules["harness.grid"])  # it sees them


def _trainers() -> set[str]:
    """The modules of ``train/`` that train a family (its ``trained_by``)."""
    from harness import speculators

    return {f.trained_by for f in speculators.FAMILIES.values() if f.trained_by}


def _method_branches(path: Path) -> list[int]:
    """Lines of ``path`` that compare with a method's name, or compare a ``method`` with
    anything but None (``spec.method is not None``: whether there is a speculator)."""
    from harness import speculators

    def names_a_method(side: ast.expr) -> bool:
        if isinstance(side, ast.Tuple | ast.List | ast.Set):  # ``in ("eagle3", ...)``
            return any(names_a_method(element) for element in side.elts)
        return isinstance(side, ast.Constant) and side.value in speculators.METHODS

    def branches(node: ast.Compare) -> bool:
        sides = (node.left, *node.comparators)
        if any(names_a_method(side) for side in sides):
            return True
        methods = any(isinstance(side, ast.Attribute) and side.attr == "method" for side in sides)
        return methods and not all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops)

    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Compare) and branches(node)
    ]


def test_only_a_family_and_its_trainer_branch_on_a_method():
    """A family is asked (``harness.speculators.get``), never compared with a method name,
    outside its module and its trainer."""
    trainers = _trainers()
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for name, path in _modules().items()
        if not name.startswith("harness.speculators") and name not in trainers
        for line in _method_branches(path)
    ]
    assert not found, found
    assert _method_branches(ROOT / "harness" / "speculators" / "__init__.py")  # it sees them


def test_the_model_build_names_no_family():
    """``train.build`` builds every trained family through its ``trained_by``, and the train
    config takes each trainer's own ``Settings``: no method name, nor a role or option named
    after one (``eagle3_cot``, ``cfg.eagle3``), in either."""
    from harness import speculators

    def family_names(path: Path) -> list[str]:
        words = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Name):
                words.append(node.id)
            elif isinstance(node, ast.Attribute):
                words.append(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                words.append(node.value)
            elif isinstance(node, ast.alias):
                words += node.name.split(".")
        return [
            word
            for word in words
            for method in speculators.METHODS
            if word == method or word.startswith(f"{method}_")
        ]

    found = family_names(ROOT / "train" / "build.py") + family_names(ROOT / "train" / "config.py")
    assert not found, found
    assert family_names(ROOT / "train" / "eagle3.py")  # it sees them
