"""Browsing single events: keyset lists, detail, payload search and its plan.

Nothing here changes a row."""
