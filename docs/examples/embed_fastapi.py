"""A FastAPI app with one native route that chats with a tool (`await host.chat`), one that streams, and a sandboxed
`http-app` component mounted under /openai (the openai-compat guest example: `llmhost build
guest-examples/openai-compat -o openai-compat.wasm --world http-app`).

Run: python docs/examples/embed_fastapi.py openai-compat.wasm (then POST /ask {"question": "..."}, GET /story,
or point an OpenAI client at http://127.0.0.1:8000/openai/v1).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from llmhost import AsyncHost, InferencingParams, InvalidInput, StreamChunk, component_app

MODEL = "smollm2-135m"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


class Question(BaseModel):
    question: str
    max_tokens: int = 64
    temperature: float = 0.7


def create_app(host: AsyncHost, component: Path) -> FastAPI:
    app = FastAPI()

    @app.post("/ask")
    async def ask(body: Question) -> dict[str, Any]:
        messages = [{"role": "user", "content": body.question}]
        params = InferencingParams(max_tokens=body.max_tokens, temperature=body.temperature)
        try:
            reply = await host.chat(MODEL, messages, params, tools=[WEATHER])
        except InvalidInput as error:  # e.g. a call cut short by max_tokens: the client's to fix
            raise HTTPException(400, str(error)) from None
        return reply.to_dict()  # OpenAI's shape: message (with tool_calls), finish_reason, usage

    @app.get("/story")
    async def story(max_tokens: int = 64) -> StreamingResponse:
        stream = await host.infer_stream("gemma-3-270m", "Once upon a time", InferencingParams(max_tokens=max_tokens))

        async def text() -> AsyncIterator[str]:
            async with stream:  # a client that disconnects cancels the generation
                async for event in stream:
                    if isinstance(event, StreamChunk):
                        yield event.text

        return StreamingResponse(text(), media_type="text/plain")

    # The guest sees paths below the mount: /openai/v1/chat/completions reaches it as /v1/chat/completions.
    app.mount("/openai", component_app(host.host, component, allowed_models=[MODEL], max_concurrency=4))
    return app


if __name__ == "__main__":
    import uvicorn

    embedded = AsyncHost()
    try:
        uvicorn.run(create_app(embedded, Path(sys.argv[1])), host="127.0.0.1", port=8000)
    finally:
        embedded.host.close()
