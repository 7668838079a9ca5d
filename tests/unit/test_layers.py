"""The packages of ``oomtrace`` form layers, and every import runs down them, never up.

From the bottom (``docs/ARCHITECTURE.md`` draws the pipeline they implement):

1. ``oomtrace`` itself (the version), ``units``, ``errors``, ``schema``, ``isotime``, ``lazy``,
   ``escape``, ``user_cache``: vocabulary and services every layer uses;
2. ``trace``, ``diagnostics``: the canonical trace on disk and what each source could be read
   for;
3. ``ingest``, ``budget``: raw inputs to a canonical trace; a model's config to a memory budget;
4. ``analysis``: a canonical trace to findings;
5. ``replay``, ``report``: what-ifs over a trace; findings to a report document;
6. ``terminal``: every command's result as text for a person;
7. ``cli`` (and ``__main__``): options in, one library call, output.

A module may import anything in a lower layer. Inside one layer, packages stay apart unless one is
built on the other, and then only that way: ``units`` and ``schema`` use ``errors``, ``schema``
takes the largest plausible byte count from ``units``, ``trace`` records ``diagnostics``,
``__main__`` runs ``cli``. ``ingest`` and ``budget`` never import each
other (a budget does not read logs; ingest does not size models), nor do ``replay`` and ``report``
(a report shows findings, not replays; a replay needs no report). Every import counts: at module
level, inside functions, and under ``TYPE_CHECKING`` (a type that points up is still a dependency
up). Imports of other top-level packages (``collectors``, standard library, third parties) are not
layered here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "oomtrace"

LAYERS: Final[tuple[frozenset[str], ...]] = (
    frozenset(
        {
            "oomtrace",
            "units",
            "errors",
            "schema",
            "isotime",
            "escape",
            "lazy",
            "user_cache",
        }
    ),
    frozenset({"trace", "diagnostics"}),
    frozenset({"ingest", "budget"}),
    frozenset({"analysis"}),
    frozenset({"replay", "report"}),
    frozenset({"terminal"}),
    frozenset({"cli", "__main__"}),
)
# Imports inside one layer: (importer, imported), the one built on the other.
WITHIN_A_LAYER: Final = frozenset(
    {
        ("units", "errors"),
        ("schema", "errors"),
        ("schema", "units"),
        ("trace", "diagnostics"),
        ("__main__", "cli"),
        ("oomtrace", "user_cache"),
    }
)
LEVEL: Final = {part: level for level, parts in enumerate(LAYERS) for part in parts}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str, root: Path = ROOT) -> bool:
    relative = Path(*name.split("."))
    return (root / relative).with_suffix(".py").is_file() or (root / relative).is_dir()


def imports(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every module ``path`` imports, wherever it does (``root`` holds
    the package)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                # ``from oomtrace.report import charts`` imports the module oomtrace.report.charts
                full = f"{base}.{alias.name}"
                yield node.lineno, full if is_module(full, root) else base


def part(module: str) -> str | None:
    """The layered part of an ``oomtrace`` module (``oomtrace.analysis.pool`` -> ``analysis``),
    None for a module outside the package."""
    names = module.split(".")
    if names[0] != "oomtrace":
        return None
    return names[1] if len(names) > 1 else "oomtrace"


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_part_of_the_package_has_a_layer() -> None:
    # A new top-level module or package must be placed in a layer before it can be imported.
    parts = {part(module_name(path)) for path in sources()}
    assert parts - set(LEVEL) == set()


def test_no_import_runs_up_the_layers_or_across_one() -> None:
    # GIVEN every import of every module of the package, function-level ones included
    broken: list[str] = []
    edges = 0
    for path in sources():
        importer = part(module_name(path))
        assert importer is not None
        for line, imported in imports(path):
            target = part(imported)
            if target is None or target == importer:
                continue
            edges += 1
            up = LEVEL[target] > LEVEL[importer]
            across = LEVEL[target] == LEVEL[importer] and (importer, target) not in WITHIN_A_LAYER
            if up or across:
                where = f"{path.relative_to(ROOT)}:{line}"
                broken.append(f"{where} imports {imported} ({importer} may not use {target})")
    # THEN there are imports between parts (the walk saw them) and none of them breaks the rule
    assert edges > 100
    assert broken == []


def test_the_walk_sees_imports_inside_functions_and_type_checking_blocks(tmp_path: Path) -> None:
    # GIVEN a package whose module imports only in a TYPE_CHECKING block and in a function,
    # one of them relative
    (tmp_path / "oomtrace" / "report").mkdir(parents=True)
    (tmp_path / "oomtrace" / "budget").mkdir()
    (tmp_path / "oomtrace" / "report" / "charts.py").write_text("", encoding="utf-8")
    probe = tmp_path / "oomtrace" / "budget" / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from oomtrace.analysis import Findings\n"
        "def f():\n    from ..report import charts\n    return charts\n",
        encoding="utf-8",
    )
    # WHEN its imports are walked
    found = [module for _, module in imports(probe, tmp_path)]
    # THEN both are found, the relative one resolved to the module it names
    assert found == ["typing", "oomtrace.analysis", "oomtrace.report.charts"]
