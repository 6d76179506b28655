"""The load generator: streaming client, SSE parser, runner, null server, calibration."""
