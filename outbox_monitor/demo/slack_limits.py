"""What Slack refuses in a message: the Block Kit limits the renderer must respect, checked
as Slack checks them (≤ 50 blocks, header ≤ 150 chars, section text ≤ 3000, button url ≤ 3000,
text ≤ 40,000).

The local Slack sink (``slack_sink``) refuses a message that breaks them, and the renderer's
tests call ``check_blocks`` on what it builds. Standard library only.
"""

import json
from typing import Any

MAX_BLOCKS = 50
MAX_HEADER_CHARS = 150
MAX_SECTION_CHARS = 3000
MAX_FIELD_CHARS = 2000
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTION_ELEMENTS = 25
MAX_BUTTON_TEXT_CHARS = 75
MAX_URL_CHARS = 3000
MAX_ACTION_ID_CHARS = 255
MAX_TEXT_CHARS = 40_000
KNOWN_BLOCK_TYPES = {"header", "section", "context", "actions", "divider", "image", "rich_text"}


def _text_length(text_object: Any) -> int:
    if isinstance(text_object, dict):
        return len(str(text_object.get("text", "")))
    return len(str(text_object or ""))


def check_blocks(blocks: Any) -> str | None:
    """Check Block Kit blocks against the Slack limits the renderer must respect.

    Args:
        blocks: the ``blocks`` value of a message (``None`` means no blocks).

    Returns:
        ``None`` when valid, else a short reason (``"header text over 150 chars"``).
    """
    if blocks is None:
        return None
    if not isinstance(blocks, list):
        return "blocks is not a list"
    if len(blocks) > MAX_BLOCKS:
        return f"{len(blocks)} blocks (over {MAX_BLOCKS})"
    action_ids: set[str] = set()
    for index, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") not in KNOWN_BLOCK_TYPES:
            return f"blocks[{index}]: unknown block"
        kind = block["type"]
        elements: list[Any] = []
        if kind == "header" and _text_length(block.get("text")) > MAX_HEADER_CHARS:
            return f"blocks[{index}]: header text over {MAX_HEADER_CHARS} chars"
        if kind == "section":
            if _text_length(block.get("text")) > MAX_SECTION_CHARS:
                return f"blocks[{index}]: section text over {MAX_SECTION_CHARS} chars"
            if any(_text_length(f) > MAX_FIELD_CHARS for f in block.get("fields") or []):
                return f"blocks[{index}]: a field over {MAX_FIELD_CHARS} chars"
            if block.get("accessory"):
                elements = [block["accessory"]]
        if kind == "context":
            elements = block.get("elements") or []
            if len(elements) > MAX_CONTEXT_ELEMENTS:
                return f"blocks[{index}]: over {MAX_CONTEXT_ELEMENTS} context elements"
            if any(_text_length(e) > MAX_SECTION_CHARS for e in elements):
                return f"blocks[{index}]: context text over {MAX_SECTION_CHARS} chars"
        if kind == "actions":
            elements = block.get("elements") or []
            if len(elements) > MAX_ACTION_ELEMENTS:
                return f"blocks[{index}]: over {MAX_ACTION_ELEMENTS} actions"
        for element in elements:
            if not isinstance(element, dict) or element.get("type") != "button":
                continue
            if _text_length(element.get("text")) > MAX_BUTTON_TEXT_CHARS:
                return f"blocks[{index}]: button text over {MAX_BUTTON_TEXT_CHARS} chars"
            if len(str(element.get("url", ""))) > MAX_URL_CHARS:
                return f"blocks[{index}]: button url over {MAX_URL_CHARS} chars"
            action_id = str(element.get("action_id", ""))
            if len(action_id) > MAX_ACTION_ID_CHARS or (action_id and action_id in action_ids):
                return f"blocks[{index}]: action_id too long or not unique"
            action_ids.add(action_id)
    return None


def message_problem(body: dict[str, Any]) -> str | None:
    """The Slack error code a message body earns (``no_text``, ``msg_too_long``,
    ``invalid_blocks``, ``invalid_blocks_format``), or ``None`` when Slack would take it.

    ``blocks`` given as a JSON string (form posts) is parsed in place.
    """
    text, blocks = body.get("text"), body.get("blocks")
    if isinstance(blocks, str):
        try:
            blocks = body["blocks"] = json.loads(blocks)
        except ValueError:
            return "invalid_blocks_format"
    if not text and not blocks:
        return "no_text"
    if text is not None and len(str(text)) > MAX_TEXT_CHARS:
        return "msg_too_long"
    if check_blocks(blocks):
        return "invalid_blocks"
    return None
