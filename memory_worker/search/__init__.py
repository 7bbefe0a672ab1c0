"""Search: the in-RAM lexical postings with their ranking columns and embeddings (numpy), the fused
score, and ranking a bank for a query. numpy values never leave this package."""

__all__: list[str] = []
