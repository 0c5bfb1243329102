"""``python -m envcore``: see ``envcore.cli``."""

import sys

from envcore.cli import main

if __name__ == "__main__":
    sys.exit(main())
