"""Streamlit's "magic" writes every bare expression of a page script onto the page: a
docstring-like string after an assignment would appear on screen."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_no_page_script_has_a_bare_string_after_its_docstring():
    scripts = [REPO / "dashboard.py", *sorted((REPO / "pages").glob("*.py"))]
    found = []
    for script in scripts:
        body = ast.parse(script.read_text()).body
        for node in body[1:]:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                found.append(f"{script.name}:{node.lineno}")
    assert len(scripts) == 11
    assert found == []
