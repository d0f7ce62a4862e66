"""The failures a test makes the local Slack sink answer with (``SlackSink.fail_next`` /
``hang_next``), and the reply Slack gives for each: a plain-text error from an incoming
webhook, ``{"ok": false, "error": …}`` from the Web API, ``Retry-After`` with a 429.
Standard library only.
"""

from dataclasses import dataclass

from outbox_monitor.demo.slack_sink_http import Reply, json_reply, text_reply

DEFAULT_RETRY_AFTER_SECONDS = 30

_ERROR_CODES = {400: "invalid_payload", 403: "invalid_token", 404: "no_service", 410: "gone"}


@dataclass
class Fault:
    """One pending failure: ``kind`` is ``"fail"`` (answer ``status``), ``"hang"`` (no
    answer, nothing posted) or ``"hold"`` (posted, the answer held ``seconds``)."""

    kind: str  # "fail" | "hang" | "hold"
    status: int = 500
    retry_after: float | str | None = None
    error: str | None = None
    seconds: float = 0.0


def fault_reply(fault: Fault, is_webhook: bool) -> Reply:
    """The answer Slack gives for ``fault``, from a webhook or from the Web API."""
    headers: dict[str, str] = {}
    if fault.status == 429:
        retry_after = (
            DEFAULT_RETRY_AFTER_SECONDS if fault.retry_after is None else fault.retry_after
        )
        headers["Retry-After"] = retry_after if isinstance(retry_after, str) else f"{retry_after:g}"
    default_code = (
        "rate_limited"
        if fault.status == 429
        else "internal_error"
        if fault.status >= 500
        else _ERROR_CODES.get(fault.status, "invalid_arguments")
    )
    code = fault.error or default_code
    if is_webhook:
        return text_reply(fault.status, code, **headers)
    if fault.status == 429:
        code = fault.error or "ratelimited"
    elif 400 <= fault.status < 500:
        code = fault.error or "invalid_arguments"
    return json_reply(fault.status, {"ok": False, "error": code}, **headers)
