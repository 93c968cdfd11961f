"""schemathesis hooks (SCHEMATHESIS_HOOKS) for test_schemathesis.py.

`not_a_server_error_but_a_deadline`: schemathesis's `not_a_server_error`, except for the one 5xx
that is an answer about the caller's own request rather than a fault: 503 `deadline_exceeded`,
when a generated `timeout_ms` (1 ms, say) leaves less time than the store has recently taken, so
the backend starts no store step and debits nothing (docs/failure-modes.md "One deadline"). Every
other 5xx, and a 503 with any other code, still fails the run as a server error."""

import json

import schemathesis


@schemathesis.check
def not_a_server_error_but_a_deadline(ctx, response, case):
    if response.status_code < 500:
        return None
    code = None
    try:
        code = json.loads(response.content).get("error")
    except (ValueError, AttributeError):
        pass
    if response.status_code == 503 and code == "deadline_exceeded":
        return None
    raise AssertionError(f"Server error: {response.status_code} {code or ''}".rstrip())
