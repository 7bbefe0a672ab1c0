"""`python -m memory_worker` is the `memory-worker` command."""

import sys

from .cli import main

sys.exit(main())
