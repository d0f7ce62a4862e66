"""Health: what kills a Postgres queue besides its volume (issue 14) — the claim's plan."""

from outbox_monitor.ui import claim_health, state

ctx = state.context()
claim_health.section(ctx.db, window=ctx.filters.window, window_label=ctx.filters.window_label)
