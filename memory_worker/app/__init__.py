"""The application: the catalog of functions and its one call entry, the wire models, and the
use cases of `MemoryService`. Transport-free: adapters translate at their own edge."""

__all__: list[str] = []
