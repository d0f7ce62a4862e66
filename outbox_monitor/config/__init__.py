"""Configuration: the settings from the environment (``settings``), single setting values,
the fleet file, strict YAML reading."""
