"""The one error type workloads raise for bad input."""

from __future__ import annotations


class WorkloadError(ValueError):
    """Bad workload input: unknown name, bad value, malformed data file.

    The message is one line naming what was wrong and the fix (the CLI prints it as is and
    exits with status 2); data-file errors name the file and the line number.
    """
