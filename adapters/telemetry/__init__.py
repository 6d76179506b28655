"""What is read from an engine and the machine while it serves: the hardware (``hardware``), energy
meters (``energy``), the engine's Prometheus ``/metrics`` (``prom``, ``engine_series``) and the
settings it actually runs with (``effective``)."""
