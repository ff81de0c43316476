"""Reading MCP tool results in assertions: their text, a printable request/response pair,
and the structured-error check (`isError`, `structuredContent {code, message}`, and text
starting `CODE: message`)."""

from __future__ import annotations

from typing import Any


def text(result: Any) -> str:
    """The concatenated text of a CallToolResult's text content."""
    return "".join(getattr(c, "text", "") for c in result.content if getattr(c, "type", None) == "text")


def show(request: tuple[str, dict[str, Any]] | None, result: Any) -> str:
    """A request and its result, for assertion messages."""
    head = f"request: {request[0]} {request[1]}\n" if request else ""
    return (
        f"{head}response: isError={result.is_error} structuredContent={result.structured_content}\n"
        f"text={text(result)[:2000]!r}"
    )


def expect_error(request: tuple[str, dict[str, Any]], result: Any, code: str) -> str:
    """Asserts a structured tool error with `code`; returns its message."""
    where = show(request, result)
    assert result.is_error is True, where
    structured = result.structured_content
    assert isinstance(structured, dict), where
    assert structured.get("code") == code, where
    message = structured.get("message")
    assert isinstance(message, str) and message, where
    assert text(result).startswith(f"{code}: {message}"), where
    return message


async def call(session: Any, name: str, arguments: dict[str, Any]) -> Any:
    return await session.call_tool(name, arguments)
