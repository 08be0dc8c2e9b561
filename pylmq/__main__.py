"""``python -m pylmq`` (and the ``pylmq`` console script): see :mod:`pylmq.cli.main`."""

import sys

from pylmq.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    # main()'s return value is the exit status (1 when the node cannot start, or a journal check
    # finds damage), so it must reach sys.exit.
    sys.exit(main())
