"""`python -m memory_worker` is the `memory-worker` command."""

import sys

from memory_worker.adapters.cli import main

sys.exit(main())
