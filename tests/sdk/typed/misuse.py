"""Each marked line must be an error under ``mypy --strict`` (tests/sdk/test_typing.py)."""

from __future__ import annotations

from tay import SyncTay, Tay

tay = Tay(mode="client")


@tay.task
def add(left: int, right: int) -> dict[str, int]:
    return {"sum": left + right}


async def misuse() -> None:
    await add.enqueue("not", "ints")  # E
    await add.enqueue(1, 2, bogus=1)  # E
    await tay.enqueue(add.bind(1, 2), retries="3")  # E
    await tay.enqueue(add.bind(1, 2), priority=5)  # E
    text: str = await (await tay.enqueue(add.bind(1, 2))).result()  # E
    print(text)
    SyncTay().enqueue(add.bind(1, 2), timeout="soon")  # E
