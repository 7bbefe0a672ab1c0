"""memory-consolidate's transports: the bus worker, the REST and in-process clients, the CLI."""

from __future__ import annotations

__all__: list[str] = []
