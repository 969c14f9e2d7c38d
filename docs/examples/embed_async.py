"""Embed the host in an asyncio program: concurrent chats on one event loop, a streamed completion, and a
generation cut short by a timeout (cancelled within one decode step, its slot freed).

Run: python docs/examples/embed_async.py
"""

from __future__ import annotations

import asyncio

from llmhost import AsyncHost, InferencingParams

MODEL = "smollm2-135m"


async def main(host: AsyncHost) -> None:
    # Four chats at once: they decode together, in one batch per step, with no thread held while they wait.
    questions = ["Name a colour.", "Name a fruit.", "Name a planet.", "Name a metal."]
    replies = await asyncio.gather(
        *(host.chat(MODEL, [{"role": "user", "content": q}], InferencingParams(max_tokens=16)) for q in questions)
    )
    for question, reply in zip(questions, replies, strict=True):
        print(question, "->", reply.to_dict()["message"]["content"])

    async with await host.infer_stream("gemma-3-270m", "Once upon a time", InferencingParams(max_tokens=24)) as story:
        async for event in story:
            print(getattr(event, "text", ""), end="", flush=True)
    print()

    try:
        async with asyncio.timeout(0.5):
            await host.infer("gemma-3-270m", "A very long story:", InferencingParams(max_tokens=2000))
    except TimeoutError:
        print("timed out: the generation was cancelled")


async def run() -> None:
    async with AsyncHost() as host:
        await main(host)


if __name__ == "__main__":
    asyncio.run(run())
