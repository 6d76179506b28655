"""``python -m own_engine --model DIR [...]``: serve the reference engine over the OpenAI API
(the command line lives in :mod:`own_engine.server.cli`)."""

import sys

from own_engine.server.cli import main

if __name__ == "__main__":
    sys.exit(main())
