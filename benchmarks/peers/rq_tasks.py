"""The no-op job the RQ peer runs (imported by name inside the RQ workers)."""


def no_op(account_key: str, payload: str, version: int) -> None:
    return None
