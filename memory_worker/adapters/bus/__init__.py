"""The iii bus adapter: engine mode on the real `iii-sdk` client (`bus.worker`), the registered
functions (`bus.catalog`), the trigger types we provide (`bus.events`) and the sibling clients
(`bus.siblings`). The core never imports this package."""

__all__: list[str] = []
