"""A small application typed against the SDK: ``mypy --strict`` must accept it as is
(tests/sdk/test_typing.py), and flags the misuses in misuse.py."""

from __future__ import annotations

import asyncio

from tay import JobHandle, ResultTimeout, SyncJobHandle, SyncTay, Task, Tay

tay = Tay(mode="client")


@tay.task(name="billing.add.v1", retries=2)
def add(left: int, right: int) -> dict[str, int]:
    return {"sum": left + right}


@tay.task
async def greet(name: str, *, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


async def main() -> int:
    typed: Task[[int, int], dict[str, int]] = add
    job: JobHandle[dict[str, int]] = await tay.enqueue(add.bind(2, 5), submission_id="invoice-42", delay=0.5)
    total: dict[str, int] = await job.result(timeout=10)
    other = await typed.enqueue(1, 2)
    text: str = await (await greet.enqueue("ada", punctuation="?")).result(timeout=5)
    try:
        await other.result(timeout=0.1)
    except ResultTimeout as expired:
        print(expired.job_id, text)
    return total["sum"]


def wsgi_view() -> int:
    with SyncTay(socket_path="/run/tay/tay.sock") as client:
        handle: SyncJobHandle[dict[str, int]] = client.enqueue(add.bind(1, 2), queue="default")
        return handle.result(timeout=5)["sum"]


if __name__ == "__main__":
    asyncio.run(main())
