"""How a rate is written for people, the same on the dashboard, in Slack and on the CLI."""

NO_VALUE = "–"


def per_minute(value: float | None) -> str:
    """A rate per minute: ``0.0833`` → ``"0.08/min"``, ``12.345`` → ``"12.3/min"``,
    ``1234.4`` → ``"1,234/min"``; ``None`` → ``"–"``.

    Args:
        value: rows per minute, or ``None`` for "no value".

    Returns:
        Two decimals under 10, one under 100, none from 100 (thousands separated).
    """
    if value is None:
        return NO_VALUE
    if value >= 100:
        return f"{value:,.0f}/min"
    if value >= 10:
        return f"{value:.1f}/min"
    return f"{value:.2f}/min"
