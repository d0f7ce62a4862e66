"""Flow control (SPEC §5): the controls the shared claim obeys — pause, concurrency and rate
limits, circuit breakers — as the operator sees and changes them (``controls``), their
settings (``model``) and the controls file applied as code (``controls_file``)."""
