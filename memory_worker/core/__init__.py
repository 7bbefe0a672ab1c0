"""The pure core: records, text and fingerprints, redaction, transitions, injection rendering,
the extraction prompt and reply parser, settings. Decisions over values; no I/O, no transport."""

__all__: list[str] = []
