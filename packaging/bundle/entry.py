"""The bundle's entry point: the same launcher as the `anyfill` console script."""

import sys

from anyfill.daemon.launcher import main

if __name__ == "__main__":
    sys.exit(main())
