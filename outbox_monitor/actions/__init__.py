"""Operator actions of SPEC §4 — reap, replay, prune — each previewed, guarded and audited.

Every action is two calls: ``preview_*`` counts the rows the filter matches, samples
them and remembers the largest id seen; the confirmed ``run.apply`` changes only rows with
``id <=`` that id that still pass the action's guard, in batches of one transaction each,
every batch writing its own audit row, all tied together by one ``run_id``.

The dashboard's previews of a replay or a prune pass ``count_cap``: they count the matched
rows only up to it and, above it, show the planner's estimate, labelled (SPEC §2); their
largest id, and so what ``apply`` changes and audits, stays exact.

One module per part: ``preview`` (what a preview holds and how a part of it is counted),
``reap``, ``replay`` and ``prune`` (the preview of each action), ``run`` (``apply``: the
confirmed change in audited batches) and ``audit`` (the audit log's writer and reader).
A new action is a module with its ``preview_*`` whose parts name the batch query it runs.
"""
