"""Adapters: the CLI, the standalone REST service, the iii bus, the data-dir watcher, the settings
file watcher, logging setup and the local embedder. The only places transports live."""

__all__: list[str] = []
