"""The harness seams as use cases: per-session state, bank selection, the pre-generate hook, turns
and the background extraction pass. They reach siblings only through `app.ports`."""

__all__: list[str] = []
