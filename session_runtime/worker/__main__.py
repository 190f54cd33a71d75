"""``python -m session_runtime.worker``: run :func:`session_runtime.worker.main`."""

import sys

from session_runtime.worker.entry import main

if __name__ == "__main__":
    sys.exit(main())
