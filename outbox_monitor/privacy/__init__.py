"""Payload privacy: sensitive keys and values redacted before anything is shown or sent."""
