"""`python -m storyd`: the same as the `storyd` command."""
import os
import sys

if os.name == "nt":  # native Windows: one line, not an ImportError on fcntl
    from storyd.core.unsupported import refuse

    sys.exit(refuse())

from storyd.cli import main

if __name__ == "__main__":
    sys.exit(main())
