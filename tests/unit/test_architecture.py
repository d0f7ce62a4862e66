"""ARCHITECTURE.md's map held against the code: the packages and what each may import, the
top level kept to a dozen modules, no import circle, and the three layering rules (pages never
reach the database layer, Streamlit stays in ui/, the demo is reached only from its commands).

Every import counts: at module level, inside functions (lazy) and under TYPE_CHECKING."""

import ast
import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "outbox_monitor"
ARCHITECTURE = REPO / "ARCHITECTURE.md"
MAX_TOP_LEVEL_MODULES = 12
EVERY = "every package"
DEMO_COMMANDS = {"demo", "demo_downstream", "demo_forgotten_transaction", "simulate"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    _module_name(path): path
    for path in PACKAGE.rglob("*.py")
    if "app" not in path.relative_to(PACKAGE).parts[:1]
}
PACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
GROUND_FLOOR = sorted(p.stem for p in PACKAGE.glob("*.py"))


def _imports(path: Path, tree: ast.Module | None = None) -> list[tuple[str, ast.AST]]:
    """Every ``outbox_monitor`` module a file imports (a name of a package that is a module
    counts as that module), with the import node (of ``tree``, the file's parse, if given)."""
    found = []
    for node in ast.walk(tree or ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "outbox_monitor":
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.append((full if full in MODULES else node.module, node))
        elif isinstance(node, ast.Import):
            found += [(a.name, node) for a in node.names if a.name.startswith("outbox_monitor")]
    return found


def _room(module: str) -> str:
    """``outbox_monitor.store.db`` → ``store``; a top-level module → its own name."""
    return module.split(".")[1] if "." in module else module


def _map() -> dict[str, str]:
    """ARCHITECTURE.md's map: package → its 'may import' cell."""
    text = ARCHITECTURE.read_text()
    section = text.split("## The map", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)/` \|[^|]*\|([^|]*)\|$", section, re.MULTILINE)
    return {package: allowed for package, allowed in rows}


def _allowed(cell: str) -> set[str]:
    named = set(re.findall(r"`(\w+)`", cell))
    if cell.strip().startswith(EVERY):
        but = cell.split(" but ", 1)[1].split(";")[0] if " but " in cell else ""
        return set(PACKAGES) - set(re.findall(r"`(\w+)`", but))
    return named


def test_the_top_level_holds_at_most_a_dozen_modules():
    assert len(GROUND_FLOOR) <= MAX_TOP_LEVEL_MODULES, GROUND_FLOOR


def test_every_package_is_on_the_map_and_imports_only_what_its_row_allows():
    rows = _map()
    assert sorted(rows) == PACKAGES, "ARCHITECTURE.md's map lists every package, once"
    wrong = []
    for module, path in MODULES.items():
        room = _room(module)
        if room not in rows:
            continue  # a top-level module: the ground floor
        allowed = _allowed(rows[room]) | {room} | set(GROUND_FLOOR)
        for imported, node in _imports(path):
            target = _room(imported) if imported != "outbox_monitor" else room
            if target not in allowed:
                wrong.append(f"{module}:{node.lineno} imports {imported}")
    assert wrong == []


def test_no_module_imports_itself_through_a_circle():
    edges = defaultdict(set)
    for module, path in MODULES.items():
        edges[module] |= {m for m, _ in _imports(path) if m in MODULES and m != module}
    circles, done = [], set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            circles.append([*trail[trail.index(module) :], module])
            return
        if module in done:
            return
        for target in sorted(edges[module]):
            visit(target, [*trail, module])
        done.add(module)

    for module in sorted(MODULES):
        visit(module, [])
    assert circles == []


def _imported_names(path: Path) -> list[tuple[str, int]]:
    """Every module name a file imports (any package), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
    return found


def test_no_page_reaches_the_database_layer():
    scripts = [REPO / "dashboard.py", *sorted((REPO / "pages").glob("*.py"))]
    reached = [
        f"{script.name}:{line} {name}"
        for script in scripts
        for name, line in _imported_names(script)
        if name.split(".")[0] in ("psycopg", "psycopg_pool")
        or name.startswith("outbox_monitor.store")
    ]
    assert len(scripts) == 11
    assert reached == []


def test_streamlit_is_imported_only_by_ui():
    outside = [
        f"{module}:{line}"
        for module, path in MODULES.items()
        if _room(module) != "ui"
        for name, line in _imported_names(path)
        if name.split(".")[0] == "streamlit"
    ]
    assert outside == []


def test_the_product_reaches_the_demo_only_from_the_demo_commands_lazily():
    reaching = []
    for module, path in MODULES.items():
        if _room(module) == "demo":
            continue
        tree = ast.parse(path.read_text())
        lazy = {}  # import node → the function it sits in
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef):
                for node in ast.walk(function):
                    lazy.setdefault(node, function.name)
        for imported, node in _imports(path, tree):
            if _room(imported) != "demo":
                continue
            where = lazy.get(node)
            if module != "outbox_monitor.cli.serving" or where not in DEMO_COMMANDS:
                reaching.append(f"{module}:{node.lineno} ({where or 'module level'})")
    assert reaching == []
