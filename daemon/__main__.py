"""`python -m storyd`: the same as the `storyd` command."""
import sys

from storyd.cli import main

if __name__ == "__main__":
    sys.exit(main())
