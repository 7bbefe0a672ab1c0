"""Storage: files are the truth. The data-dir lock, the fsynced append log with its checksums and
batches, rules, the vector sidecar, one bank in RAM (`Bank.commit()`, the single mutation choke
point) and the bank registry."""

__all__: list[str] = []
