"""Tool schemas for the sample set.

This module owns the tools offered in the sample's tool-use prompts: realistic OpenAI function schemas
with required parameters, types and enums, plus the system prompts and tool-free questions that go with
them. The scenarios that call these tools live in prompts/sample_scenarios.py.
"""

from __future__ import annotations

from typing import Any


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


TOOLS: dict[str, dict[str, Any]] = {
    t["function"]["name"]: t
    for t in (
        _fn(
            "get_current_weather",
            "Get the current weather for a location.",
            {
                "location": _s("City and country, e.g. 'Paris, France'"),
                "unit": _s("Temperature unit", enum=["celsius", "fahrenheit"]),
            },
            ["location"],
        ),
        _fn(
            "get_weather_forecast",
            "Get the daily weather forecast for a location.",
            {
                "location": _s("City and country, e.g. 'Paris, France'"),
                "days": {"type": "integer", "description": "Number of days to forecast", "minimum": 1, "maximum": 14},
            },
            ["location", "days"],
        ),
        _fn(
            "web_search",
            "Search the web and return the top results with title, URL and snippet.",
            {
                "query": _s("The search query"),
                "num_results": {"type": "integer", "description": "How many results to return", "default": 5},
            },
            ["query"],
        ),
        _fn(
            "read_file",
            "Read a text file from the user's workspace and return its contents.",
            {"path": _s("Path relative to the workspace root")},
            ["path"],
        ),
        _fn(
            "write_file",
            "Write text to a file in the user's workspace, replacing its contents.",
            {"path": _s("Path relative to the workspace root"), "content": _s("The full new file contents")},
            ["path", "content"],
        ),
        _fn(
            "list_directory",
            "List the files and folders in a directory of the user's workspace.",
            {
                "path": _s("Directory path relative to the workspace root"),
                "recursive": {"type": "boolean", "description": "Include subdirectories", "default": False},
            },
            ["path"],
        ),
        _fn(
            "run_sql_query",
            "Run a read-only SQL query against the company database and return the rows.",
            {
                "query": _s("A single SELECT statement"),
                "database": _s("Which database to query", enum=["analytics", "sales", "inventory"]),
            },
            ["query", "database"],
        ),
        _fn(
            "create_calendar_event",
            "Create an event in the user's calendar.",
            {
                "title": _s("Event title"),
                "start": _s("Start time, ISO 8601", format="date-time"),
                "end": _s("End time, ISO 8601", format="date-time"),
                "attendees": {
                    "type": "array",
                    "items": {"type": "string", "format": "email"},
                    "description": "Email addresses to invite",
                },
                "location": _s("Room or address"),
            },
            ["title", "start", "end"],
        ),
        _fn(
            "list_calendar_events",
            "List the events in the user's calendar between two dates.",
            {"start_date": _s("First day, YYYY-MM-DD"), "end_date": _s("Last day, YYYY-MM-DD")},
            ["start_date", "end_date"],
        ),
        _fn(
            "run_shell_command",
            "Run a shell command on the user's machine and return stdout, stderr and the exit code.",
            {
                "command": _s("The command line to run with bash"),
                "timeout_seconds": {
                    "type": "integer",
                    "description": "Kill the command after this long",
                    "default": 30,
                },
            },
            ["command"],
        ),
        _fn(
            "send_email",
            "Send an email from the user's account.",
            {
                "to": {"type": "array", "items": {"type": "string"}, "description": "Recipient addresses"},
                "subject": _s("Subject line"),
                "body": _s("Plain-text body"),
            },
            ["to", "subject", "body"],
        ),
        _fn(
            "get_stock_quote",
            "Get the latest price and daily change for a stock ticker.",
            {"symbol": _s("Ticker symbol, e.g. 'AAPL'")},
            ["symbol"],
        ),
        _fn(
            "convert_currency",
            "Convert an amount between currencies at today's rate.",
            {
                "amount": {"type": "number", "description": "Amount to convert"},
                "from_currency": _s("ISO 4217 code, e.g. 'USD'"),
                "to_currency": _s("ISO 4217 code, e.g. 'EUR'"),
            },
            ["amount", "from_currency", "to_currency"],
        ),
        _fn(
            "search_flights",
            "Search one-way flights between two airports on a date.",
            {
                "origin": _s("IATA airport code"),
                "destination": _s("IATA airport code"),
                "departure_date": _s("YYYY-MM-DD"),
                "passengers": {"type": "integer", "minimum": 1, "default": 1},
            },
            ["origin", "destination", "departure_date"],
        ),
    )
}

TOOL_SYSTEM = (
    "You are a helpful assistant with access to tools. Use them when they help; otherwise answer directly.",
    "You are an assistant that can call functions. Today's date is 2025-03-14.",
    "You are a coding agent working in the user's project workspace. Use the tools to inspect and change files.",
)


# Requests that need no tool even though tools are offered: the model should just answer.
NO_TOOL_NEEDED = (
    "What's the capital of Australia?",
    "Can you explain what a mutex is in one paragraph?",
    "Write a two-line birthday message for my colleague Sam.",
    "What's 15% of 240?",
)
