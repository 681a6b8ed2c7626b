"""Retry conditions: only failures that another attempt can fix (network, timeouts, busy stores)."""

from __future__ import annotations

from typing import Any


def is_transient(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, OSError):  # a busy disk or socket, not a missing file or a permission
        return not isinstance(exc, (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
                                    NotADirectoryError))
    name = type(exc).__name__
    # httpx/openai/sqlalchemy are imported lazily, so match their transient error types by name.
    if name in {"ConnectError", "ReadTimeout", "ConnectTimeout", "RemoteProtocolError", "PoolTimeout",
                "APIConnectionError", "APITimeoutError", "RateLimitError", "InternalServerError",
                "OperationalError"}:
        return True
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and (status >= 500 or status in (408, 429)):
        return True
    # MLflow wraps store errors; TEMPORARILY_UNAVAILABLE and friends carry these codes.
    code = getattr(exc, "error_code", None)
    return code in {"TEMPORARILY_UNAVAILABLE", "INTERNAL_ERROR", "REQUEST_LIMIT_EXCEEDED"}


def io_only(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry the task only when it failed on I/O."""
    exc = state.data if isinstance(state.data, BaseException) else None
    if exc is None:
        try:
            exc = state.result(raise_on_failure=False)
        except Exception as err:  # a result that cannot be read back: judge by that error
            exc = err
    return is_transient(exc if isinstance(exc, BaseException) else None)
