"""The generic checks of openai-compat's requests: types and ranges of single fields, each raising `BadRequest`
that names the offending `param` the way OpenAI does. validate.py builds each route's request from them."""

import math


class BadRequest(Exception):
    """An OpenAI error: `{"error": {"message", "type", "param", "code"}}` with an HTTP status."""

    def __init__(self, message, param=None, status=400, code=None, kind=None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_error")

    def json(self):
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


def model_not_found(model):
    return BadRequest(
        f"The model `{model}` does not exist or you do not have access to it.", "model", 404, "model_not_found"
    )


def wrong(param, expected, value):
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return BadRequest(
        f"Invalid type for '{param}': expected {expected}, but got {names.get(type(value), 'a number')}.", param
    )


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# -- field checkers: check(value, param) -> the checked value; `value` is None when the field is absent ---------


def number(low, high, default, kind=float, low_open=False):
    """A number in [low, high] (`high` None: no bound); `kind` int: an integer (a float with an integral value too)."""

    def check(value, param):
        if value is None:
            return default
        if kind is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        if not is_number(value) or not math.isfinite(value) or (kind is int and not isinstance(value, int)):
            raise wrong(param, "an integer" if kind is int else "a number", value)
        if value < low or (high is not None and value > high) or (low_open and value == low):
            bound = f"at least {low}" if high is None else f"in {'(' if low_open else '['}{low}, {high}]"
            raise BadRequest(f"'{param}' must be {bound}; got {value}", param, code="invalid_value")
        return kind(value)

    return check


def boolean(default=False):
    def check(value, param):
        if value is None:
            return default
        if not isinstance(value, bool):
            raise wrong(param, "a boolean", value)
        return value

    return check


def string(value, param, allow_empty=True):
    if not isinstance(value, str):
        raise wrong(param, "a string", value)
    if not allow_empty and not value:
        raise BadRequest(f"'{param}' must not be empty", param, code="invalid_value")
    return value


def obj(value, param):
    if not isinstance(value, dict):
        raise wrong(param, "an object", value)
    return value


def array(value, param, item, expected="an array"):
    """A list whose items are checked by `item(value, param)`, each named `param[i]`."""
    if not isinstance(value, list):
        raise wrong(param, expected, value)
    return [item(v, f"{param}[{i}]") for i, v in enumerate(value)]


def refused(message, allowed=(None,)):
    def check(value, param):
        if value not in allowed:
            raise BadRequest(message, param)
        return value

    return check


def model(value, param):
    """A model name, or None (absent or null) for the component's default model, as local servers do."""
    return None if value is None else string(value, param, allow_empty=False)
