"""Schemathesis checks of our own for dispatcher/tests/openapi_fuzz.rs (loaded through
SCHEMATHESIS_HOOKS): every 4xx answer is a JSON body that names the part of the request
at fault in a non-empty `field` (docs/api.md)."""

import json

import schemathesis


@schemathesis.check
def client_error_names_its_field(ctx, response, case):
    """A 4xx body is JSON `{"error": <non-empty string>, "field": <non-empty string>}`."""
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = json.loads(response.content or b"")
    except ValueError as e:
        raise AssertionError(
            f"{response.status_code} answer is not JSON ({e}): {response.content[:200]!r}"
        )
    if not isinstance(body, dict):
        raise AssertionError(f"{response.status_code} answer is not a JSON object: {body!r}")
    field = body.get("field")
    if not isinstance(field, str) or not field:
        raise AssertionError(
            f"{response.status_code} answer does not name the field at fault: {body!r}"
        )
    error = body.get("error")
    if not isinstance(error, str) or not error:
        raise AssertionError(f"{response.status_code} answer has no error message: {body!r}")
    return True
