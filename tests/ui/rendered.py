"""The text a person reads from the markdown source AppTest returns: backslash escapes and
code-span fences removed (what ``format.md_text`` / ``format.md_code`` add)."""

import re
from collections.abc import Iterator

_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")


def _backtick_run(text: str, start: int) -> int:
    end = start
    while end < len(text) and text[end] == "`":
        end += 1
    return end - start


def segments(markdown: str) -> Iterator[tuple[str, str]]:
    """``("text" | "escape" | "code", what is read)`` pieces of inline markdown, as
    CommonMark reads backslash escapes and code spans (nothing else is interpreted)."""
    i = 0
    while i < len(markdown):
        char = markdown[i]
        if char == "\\" and i + 1 < len(markdown) and _PUNCTUATION.match(markdown[i + 1]):
            yield "escape", markdown[i + 1]
            i += 2
        elif char == "`":
            size = _backtick_run(markdown, i)
            j = i + size
            while j < len(markdown):
                if markdown[j] == "`":
                    run = _backtick_run(markdown, j)
                    if run == size:
                        break
                    j += run
                else:
                    j += 1
            if j >= len(markdown):  # no closing fence: literal backticks
                yield "text", "`" * size
                i += size
                continue
            content = markdown[i + size : j]
            if len(content) > 1 and content[0] == content[-1] == " " and content.strip():
                content = content[1:-1]
            yield "code", content
            i = j + size
        else:
            yield "text", char
            i += 1


def plain(markdown: str) -> str:
    """``x \\`y\\` in ``` ``a`b`` ``` → ``x `y` in a`b``: escapes and code spans read as
    CommonMark reads them; emphasis markers and the rest stay as they are."""
    return "".join(text for _, text in segments(markdown))


def unprotected(markdown: str) -> str:
    """The text of ``markdown`` that is neither escaped nor in a code span: what markdown
    (and Streamlit's rewrites) may still interpret."""
    return "".join(text if kind == "text" else " " for kind, text in segments(markdown))
