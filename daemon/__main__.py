"""`python -m storyd`: the same as the `storyd` command."""
import os
import sys

if os.name == "nt":  # native Windows: one line, not an ImportError on fcntl
    from storyd.core.unsupported import windows_exit

    sys.exit(windows_exit())

from storyd.cli import main

if __name__ == "__main__":
    sys.exit(main())
