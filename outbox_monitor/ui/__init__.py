"""Streamlit-only helpers of the dashboard: state, cached loaders, charts, formats, banners.

The only part of ``outbox_monitor`` that imports streamlit; pages import from here.
"""
