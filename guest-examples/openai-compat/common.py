"""Helpers the API modules share (app.py's OpenAI routes, messages.py's Anthropic ones): JSON bodies in and out,
and the one mapping of the SDK's errors onto HTTP errors (`BadRequest`)."""

import json

from checks import BadRequest, model_not_found
from llmhost_guest import InvalidInput, ModelNotSupported
from validate import check_unicode
from wit_world.imports import http

# A stream with less time than this left before its hard cap ends now (finish_reason "length").
WIND_DOWN_MS = 1500
# The request field a host `invalid-input` message is about (its messages name the WIT field).
PARAM_OF_MESSAGE = [
    ("max-tokens", "max_tokens"), ("temperature", "temperature"), ("top-p", "top_p"), ("top-k", "top_k"),
    ("stop", "stop"), ("seed", "seed"), ("logit", "logit_bias"), ("frequency", "frequency_penalty"),
    ("presence", "presence_penalty"), ("logprobs", "top_logprobs"), ("schema", "response_format"),
    ("constraint", "response_format"), ("tool", "tools"),
]  # fmt: skip


def api_error(error, model, writer, param=None):
    """The `BadRequest` for a failed host call: the one place that maps the SDK's errors."""
    if isinstance(error, ModelNotSupported):
        if "embedding-only" in error.message:  # the model exists but cannot generate: say why (the host's words)
            return BadRequest(error.message, "model", 400, "model_not_supported")
        return model_not_found(model)
    message = error.message or "generation failed"
    if isinstance(error, InvalidInput):
        return BadRequest(message, next((p for needle, p in PARAM_OF_MESSAGE if needle in message), param))
    if writer.time_left_ms() == 0:  # the server told us our time is up (it cancelled the generation)
        return BadRequest(f"the request ran out of time: {message}", None, 504, "timeout", "timeout_error")
    return BadRequest(message, None, 500)


def json_response(status, value):
    return http.Response(status=status, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


def read_json(request):
    try:
        body = json.loads(bytes(request.body))
    except ValueError:
        raise BadRequest(
            "We could not parse the JSON body of your request. The body must be a JSON object.", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object", code="invalid_json")
    check_unicode(body)
    return body
