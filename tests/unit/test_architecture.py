"""ARCHITECTURE.md's map held against the code: the rooms (each package, each top-level
module of the ground floor, the pages with dashboard.py) and what each may import, the top
level kept to a dozen modules, no circle of modules, the circles of packages ARCHITECTURE.md
names and no other, and the three layering rules (pages never reach the database layer,
Streamlit stays in ui/ and the pages, the demo is reached only from its commands).

The checks are functions over a set of files (path → source): the tests run them on the
checkout, and on the checkout with one offending line added in memory, to prove that each
rule fails when broken (milliseconds a case).

What counts as an import: ``import a.b`` and ``from a import b`` at module level, inside
functions (lazy) and under TYPE_CHECKING; ``from a import b`` counts as importing module
``a.b`` when it is one (``from outbox_monitor import store`` imports ``store/``); relative
imports, resolved against the importing module's package; ``importlib.import_module`` and
``__import__`` called with a constant name (a relative one with a constant or
``__package__`` anchor); the CLI's lazy subcommands, the ``"module:attribute"`` strings of a
``lazy_subcommands={...}`` table. What stays invisible: a module name computed at run time
(a variable, an f-string, a name read from a file or an entry point), ``__import__``'s
``fromlist``, ``importlib.util``/``runpy``/``exec`` of code by path or text, and the page
scripts Streamlit runs by path (``st.Page("pages/…")``: checked as files, not as imports).
"""

import ast
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "ARCHITECTURE.md"
MAX_TOP_LEVEL_MODULES = 12
PAGE_SCRIPTS = 11
EVERY = "every package"
PAGES = "pages"
"""The room of ``pages/*.py`` and ``dashboard.py``."""
DATABASE_DRIVERS = ("psycopg", "psycopg_pool")
DEMO_COMMANDS = {"demo", "demo_downstream", "demo_forgotten_transaction", "simulate"}
DEMO_COMMANDS_MODULE = "outbox_monitor.cli.serving"


@dataclass(frozen=True)
class Import:
    """One import: the importing module, the module imported (absolute), its line and the
    outermost function holding it (None at module level)."""

    module: str
    target: str
    line: int
    function: str | None

    def __str__(self) -> str:
        where = f" (in {self.function})" if self.function else ""
        return f"{self.module}:{self.line} imports {self.target}{where}"


def module_name(path: str) -> str:
    """``outbox_monitor/store/db.py`` → ``outbox_monitor.store.db``; ``pages/fleet.py`` →
    ``pages.fleet``; a package's ``__init__.py`` → the package."""
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def checkout() -> dict[str, str]:
    """The checked files of the checkout: path relative to the repository → source."""
    paths = [
        *(REPO / "outbox_monitor").rglob("*.py"),
        REPO / "dashboard.py",
        *(REPO / "pages").glob("*.py"),
    ]
    return {path.relative_to(REPO).as_posix(): path.read_text() for path in paths}


def _absolute(name: str, level: int, package: str) -> str:
    """A relative import's module, absolute: ``level`` dots up from ``package``."""
    if level == 0:
        return name
    parts = package.split(".")
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, name] if name else parts)


def _constant(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _argument(call: ast.Call, position: int, keyword: str) -> ast.AST | None:
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _dynamic_imports(call: ast.Call, package: str) -> Iterator[str]:
    """The constant module names a call imports: ``importlib.import_module(name[,
    package])``, ``__import__(name, …, level)``, a ``lazy_subcommands`` table's
    ``"module:attribute"`` values."""
    function = call.func
    called = getattr(function, "attr", None) or getattr(function, "id", None)
    name = _constant(call.args[0]) if call.args else None
    if called == "import_module" and name:
        level = len(name) - len(name.lstrip("."))
        anchor = _argument(call, 1, "package")
        if level == 0:
            yield name
        elif isinstance(anchor, ast.Name) and anchor.id == "__package__":
            yield _absolute(name[level:], level, package)
        elif _constant(anchor):
            yield _absolute(name[level:], level, _constant(anchor))
    elif called == "__import__" and name:
        level = _argument(call, 4, "level")
        level = level.value if isinstance(level, ast.Constant) else 0
        yield _absolute(name, level, package)
    for keyword in call.keywords:
        if keyword.arg == "lazy_subcommands" and isinstance(keyword.value, ast.Dict):
            for value in keyword.value.values:
                if _constant(value):
                    yield _constant(value).split(":")[0]


@cache
def find_imports(path: str, source: str, modules: frozenset[str]) -> tuple[Import, ...]:
    """Every import of one file (see the module's docstring for what counts), each target
    absolute; ``from a import b`` is module ``a.b`` when ``modules`` holds it."""
    module = module_name(path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    tree = ast.parse(source)
    outermost = {}  # node → the outermost function holding it (ast.walk goes outside in)
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                outermost.setdefault(node, function.name)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", node.level, package)
            named = [f"{base}.{alias.name}" for alias in node.names]
            targets = [name if name in modules else base for name in named]
        elif isinstance(node, ast.Call):
            targets = list(_dynamic_imports(node, package))
        else:
            continue
        found += [Import(module, t, node.lineno, outermost.get(node)) for t in targets]
    return tuple(dict.fromkeys(found))


class Tree:
    """The files checked: their modules, packages, ground floor and imports."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.modules = frozenset(module_name(path) for path in files)
        top = [path.split("/")[1:] for path in files if path.startswith("outbox_monitor/")]
        self.packages = sorted(parts[0] for parts in top if parts[1:] == ["__init__.py"])
        self.ground_floor = sorted(parts[0] for parts in top if len(parts) == 1)
        self.pages = sorted(path for path in files if self.room(module_name(path)) == PAGES)
        self.imports = [
            found
            for path, source in files.items()
            for found in find_imports(path, source, self.modules)
        ]

    def room(self, module: str) -> str | None:
        """The map's room of a module: a package (``store``), a top-level module's file
        (``access.py``), ``pages``; None outside the project (stdlib, third parties)."""
        parts = module.split(".")
        if parts[0] in (PAGES, "dashboard"):
            return PAGES
        if parts[0] != "outbox_monitor":
            return None
        if len(parts) == 1:
            return "__init__.py"
        return parts[1] if parts[1] in self.packages else f"{parts[1]}.py"

    def rooms(self) -> list[str]:
        return sorted([*self.packages, *self.ground_floor, PAGES])


def read_map(text: str) -> dict[str, str]:
    """ARCHITECTURE.md's map: room → its 'may import' cell (parentheses dropped)."""
    section = text.split("## The map", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for first, cell in re.findall(r"^\| ([^|]+) \|[^|]*\|([^|]*)\|$", section, re.MULTILINE):
        if first in ("package", "module", "room") or set(first) <= {"-"}:
            continue
        key = re.fullmatch(r"`(\w+)/`|`(\w+\.py)`|`pages/\*\.py`, `dashboard\.py`", first)
        assert key, f"ARCHITECTURE.md's map: a row of no room: {first}"
        room = key.group(1) or key.group(2) or PAGES
        assert room not in rows, f"ARCHITECTURE.md's map lists {room} twice"
        rows[room] = re.sub(r"\([^)]*\)", "", cell)
    return rows


def allowed(cell: str, tree: Tree) -> set[str]:
    """A 'may import' cell's rooms and single modules (``store.queries``)."""
    named = set(re.findall(r"`([\w.]+)`", cell))
    if cell.strip().startswith(EVERY):
        but = cell.split(" but ", 1)[1].split(";")[0] if " but " in cell else ""
        return set(tree.packages) - set(re.findall(r"`(\w+)`", but))
    return named


def map_breaks(tree: Tree, rows: dict[str, str]) -> list[str]:
    """Imports the importing room's row does not allow (every room may import its own and
    the ground floor)."""
    wrong = []
    for found in tree.imports:
        source, target = tree.room(found.module), tree.room(found.target)
        if target is None or target == source or target in tree.ground_floor:
            continue
        may = allowed(rows.get(source, ""), tree)
        dotted = found.target.removeprefix("outbox_monitor.")
        if target not in may and not any(dotted == m or dotted.startswith(f"{m}.") for m in may):
            wrong.append(str(found))
    return wrong


def database_breaks(tree: Tree) -> list[str]:
    """Imports of psycopg or ``store/`` by the pages and dashboard.py."""
    return [
        str(found)
        for found in tree.imports
        if tree.room(found.module) == PAGES
        and (found.target.split(".")[0] in DATABASE_DRIVERS or tree.room(found.target) == "store")
    ]


def streamlit_breaks(tree: Tree) -> list[str]:
    """Imports of Streamlit outside ui/ and the pages."""
    return [
        str(found)
        for found in tree.imports
        if tree.room(found.module) not in ("ui", PAGES)
        and found.target.split(".")[0] == "streamlit"
    ]


def demo_breaks(tree: Tree) -> list[str]:
    """Imports of demo/ from outside it, but in the CLI's demo commands."""
    return [
        str(found)
        for found in tree.imports
        if tree.room(found.module) != "demo"
        and tree.room(found.target) == "demo"
        and (found.module != DEMO_COMMANDS_MODULE or found.function not in DEMO_COMMANDS)
    ]


def module_circles(tree: Tree) -> list[str]:
    """Circles of modules importing each other (lazy imports included)."""
    edges = defaultdict(set)
    for found in tree.imports:
        if found.target in tree.modules and found.target != found.module:
            edges[found.module].add(found.target)
    circles, done = [], set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            circles.append(" → ".join([*trail[trail.index(module) :], module]))
            return
        if module in done:
            return
        for target in sorted(edges[module]):
            visit(target, [*trail, module])
        done.add(module)

    for module in sorted(tree.modules):
        visit(module, [])
    return circles


def room_circles(tree: Tree) -> set[frozenset[str]]:
    """The rooms that import each other round a circle: the strongly connected components
    of more than one room of the rooms' import graph (Tarjan)."""
    edges = defaultdict(set)
    for found in tree.imports:
        source, target = tree.room(found.module), tree.room(found.target)
        if target is not None and target != source:
            edges[source].add(target)
    index, low, stack, components = {}, {}, [], set()

    def connect(room: str) -> None:
        index[room] = low[room] = len(index)
        stack.append(room)
        for target in sorted(edges[room]):
            if target not in index:
                connect(target)
                low[room] = min(low[room], low[target])
            elif target in stack:
                low[room] = min(low[room], index[target])
        if low[room] == index[room]:
            component = {stack.pop()}
            while room not in component:
                component.add(stack.pop())
            if len(component) > 1:
                components.add(frozenset(component))

    for room in tree.rooms():
        if room not in index:
            connect(room)
    return components


def stated_circles(text: str) -> set[frozenset[str]]:
    """The circles of rooms ARCHITECTURE.md states: under '### Circles that remain', each
    '- ' line's backquoted rooms before its colon."""
    section = text.split("### Circles that remain", 1)[1].split("\n#", 1)[0]
    lines = re.findall(r"^- (.*?):", section, re.MULTILINE)
    return {frozenset(re.findall(r"`([\w.]+)/?`", line)) for line in lines}


def circle_breaks(tree: Tree, text: str) -> list[str]:
    """The circles of rooms ARCHITECTURE.md does not state, and those it states that are
    gone."""
    found, stated = room_circles(tree), stated_circles(text)
    return [f"unstated: {sorted(c)}" for c in found - stated] + [
        f"stated, gone: {sorted(c)}" for c in stated - found
    ]


@cache
def _checkout_tree() -> Tree:
    return Tree(checkout())


@pytest.fixture(scope="module")
def tree() -> Tree:
    return _checkout_tree()


@pytest.fixture(scope="module")
def text() -> str:
    return ARCHITECTURE.read_text()


def test_the_top_level_holds_at_most_a_dozen_modules(tree):
    assert len(tree.ground_floor) <= MAX_TOP_LEVEL_MODULES, tree.ground_floor


def test_every_room_is_on_the_map_once_and_names_only_real_rooms_and_modules(tree, text):
    rows = read_map(text)
    assert sorted(rows) == tree.rooms(), "ARCHITECTURE.md's map lists every room"
    assert len(tree.pages) == PAGE_SCRIPTS, tree.pages
    named = {name for cell in rows.values() for name in allowed(cell, tree)}
    unknown = [
        name
        for name in named
        if name not in tree.rooms() and f"outbox_monitor.{name}" not in tree.modules
    ]
    assert unknown == []


def test_every_module_imports_only_what_its_row_allows(tree, text):
    assert map_breaks(tree, read_map(text)) == []


def test_no_module_imports_itself_through_a_circle(tree):
    assert module_circles(tree) == []


def test_the_circles_of_packages_are_those_architecture_md_states(tree, text):
    assert circle_breaks(tree, text) == []


def test_no_page_reaches_the_database_layer(tree):
    assert database_breaks(tree) == []


def test_streamlit_is_imported_only_by_ui_and_the_pages(tree):
    assert streamlit_breaks(tree) == []


def test_the_product_reaches_the_demo_only_from_the_demo_commands_lazily(tree):
    assert demo_breaks(tree) == []


CHECKS: dict[str, Callable[[Tree, str], list[str]]] = {
    "map": lambda tree, text: map_breaks(tree, read_map(text)),
    "circles of modules": lambda tree, text: module_circles(tree),
    "circles of packages": circle_breaks,
    "database": lambda tree, text: database_breaks(tree),
    "streamlit": lambda tree, text: streamlit_breaks(tree),
    "demo": lambda tree, text: demo_breaks(tree),
}

BREAKS = {
    # a page names the package, then its attribute (issue 28's attack, hole 1)
    "a page imports store/ by name": (
        "pages/overview.py",
        "from outbox_monitor import store\n",
        {"map", "database"},
    ),
    "a page imports psycopg": ("pages/fleet.py", "import psycopg\n", {"database"}),
    # pages and dashboard.py have a row, and the demo rule holds them (hole 2)
    "a page imports demo/": (
        "pages/overview.py",
        "from outbox_monitor.demo.run import run_demo\n",
        {"map", "demo"},
    ),
    "the dashboard imports demo/": (
        "dashboard.py",
        "from outbox_monitor.demo import drill\n",
        {"map", "demo"},
    ),
    "a page imports the scheduler": (
        "pages/health.py",
        "from outbox_monitor.service import scheduler\n",
        {"map"},
    ),
    "a page imports an action's module its row does not name": (
        "pages/actions.py",
        "from outbox_monitor.actions import run\n",
        {"map"},
    ),
    # relative imports, resolved (hole 3)
    "alerts/ imports ui/ relatively": (
        "outbox_monitor/alerts/rules.py",
        "from ..ui import state\n",
        {"map", "circles of packages"},
    ),
    "alerts/ imports demo/ relatively, lazily": (
        "outbox_monitor/alerts/rules.py",
        "def _hidden():\n    from ..demo import run\n",
        {"map", "demo"},
    ),
    "a package's __init__ imports ui/ relatively": (
        "outbox_monitor/store/__init__.py",
        "from .. import ui\n",
        {"map"},
    ),
    "two modules import each other relatively": (
        "outbox_monitor/store/db_errors.py",
        "from . import db\n",
        {"circles of modules"},
    ),
    # the ground floor has rows (hole 4)
    "the ground floor imports ui/ (Streamlit), lazily": (
        "outbox_monitor/shipped.py",
        "def _hidden():\n    from outbox_monitor.ui import static_assets\n",
        {"map"},
    ),
    "errors.py imports store/": (
        "outbox_monitor/errors.py",
        "from outbox_monitor.store import db\n",
        {"map"},
    ),
    "logs.py imports Streamlit": ("outbox_monitor/logs.py", "import streamlit\n", {"streamlit"}),
    # constant names given to importlib and __import__, the CLI's lazy table (hole 5)
    "alerts/ imports demo/ through importlib": (
        "outbox_monitor/alerts/rules.py",
        "import importlib\n\ndef _hidden():\n"
        '    return importlib.import_module("outbox_monitor.demo.run")\n',
        {"map", "demo"},
    ),
    "figures/ imports Streamlit through __import__": (
        "outbox_monitor/figures/metrics.py",
        'streamlit = __import__("streamlit")\n',
        {"streamlit"},
    ),
    "store/ imports ui/ through a relative import_module": (
        "outbox_monitor/store/db.py",
        'from importlib import import_module\n\nstate = import_module("..ui.state", __package__)\n',
        {"map"},
    ),
    "the CLI's lazy table names a demo module": (
        "outbox_monitor/cli/__init__.py",
        'extra = click.Group(lazy_subcommands={"x": "outbox_monitor.demo.run:run_demo"})\n',
        {"demo"},
    ),
    # a circle of packages ARCHITECTURE.md does not state (hole 6)
    "a new circle of packages": (
        "outbox_monitor/store/indexes.py",
        "from outbox_monitor.ui import format\n",
        {"map", "circles of packages"},
    ),
}


@pytest.mark.parametrize("name", BREAKS)
def test_each_rule_fails_when_a_line_breaks_it(tree, text, name):
    path, line, rules = BREAKS[name]
    files = {**tree.files, path: f"{tree.files[path]}\n{line}"}
    broken = Tree(files)
    failing = {rule for rule, check in CHECKS.items() if check(broken, text)}
    assert rules <= failing, f"{name}: only {failing or 'none'} fail"
