"""Tool-use scenarios for the sample set.

This module owns the conversations behind the sample's tool prompts. A scenario is one user request,
the tool calls a good assistant would make (in steps; calls in one step are made together), a plausible
result for each, and a final answer. prompts/make_sample.py cuts a scenario at different points: before
the first call, after the results, or after the answer (a turn the client regenerates).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Call = tuple[str, dict[str, Any], Any]  # tool name, arguments, result (JSON value or text)


@dataclass(frozen=True, slots=True)
class Scenario:
    tools: tuple[str, ...]
    user: str
    steps: tuple[tuple[Call, ...], ...]  # each step: calls made together, before any of their results
    answer: str
    preamble: str | None = None  # what the assistant says as it makes the first call


CITIES = (
    ("Paris", "France"),
    ("Tokyo", "Japan"),
    ("Chicago", "USA"),
    ("Nairobi", "Kenya"),
    ("Melbourne", "Australia"),
    ("Oslo", "Norway"),
    ("Lima", "Peru"),
    ("Seoul", "South Korea"),
)
CONDITIONS = ("clear sky", "light rain", "overcast", "partly cloudy", "thunderstorms", "light snow")


def weather_now(r: random.Random) -> Scenario:
    city, country = r.choice(CITIES)
    t, h, w, cond = r.randint(-5, 33), r.randint(30, 95), r.randint(2, 40), r.choice(CONDITIONS)
    loc = f"{city}, {country}"
    return Scenario(
        ("get_current_weather",),
        r.choice((f"What's the weather like in {city} right now?", f"Is it raining in {city} at the moment?")),
        (
            (
                (
                    "get_current_weather",
                    {"location": loc, "unit": "celsius"},
                    {
                        "location": loc,
                        "temperature": t,
                        "unit": "celsius",
                        "condition": cond,
                        "humidity": h,
                        "wind_kph": w,
                    },
                ),
            ),
        ),
        f"Right now in {city} it's {t}°C with {cond}, humidity around {h}% and wind at {w} km/h.",
    )


def forecast_two(r: random.Random) -> Scenario:
    (a, ca), (b, cb) = r.sample(CITIES, 2)
    calls = tuple(
        (
            "get_weather_forecast",
            {"location": f"{c}, {k}", "days": 2},
            {
                "location": f"{c}, {k}",
                "daily": [
                    {
                        "date": d,
                        "high_c": r.randint(0, 30),
                        "low_c": r.randint(-8, 15),
                        "condition": r.choice(CONDITIONS),
                    }
                    for d in ("2025-03-15", "2025-03-16")
                ],
            },
        )
        for c, k in ((a, ca), (b, cb))
    )
    return Scenario(
        ("get_weather_forecast",),
        f"I'm flying from {a} to {b} tomorrow. Do I need a jacket for either city?",
        (calls,),
        " ".join(_forecast_line(result) for _, _, result in calls) + " A jacket is worth packing if either low "
        "is under 12°C.",
        preamble="Let me check the forecast for both cities.",
    )


def _forecast_line(result: dict[str, Any]) -> str:
    days = result["daily"]
    lows = ", ".join(f"{d['low_c']}°C" for d in days)
    return f"{result['location']}: {days[0]['condition']} tomorrow, lows of {lows}."


TOPICS = (
    "solid-state batteries",
    "the James Webb Space Telescope",
    "the EU AI Act",
    "RISC-V laptops",
    "urban heat islands",
    "lab-grown meat regulation",
)


def search(r: random.Random) -> Scenario:
    topic = r.choice(TOPICS)
    slug = topic.lower().replace(" ", "-")
    results = [
        {"title": f"{title} {topic}", "url": f"https://{site}/{slug}", "snippet": snip}
        for title, site, snip in (
            (
                "What's new with",
                "news.example.com",
                "A round-up of this month's developments and what experts expect next.",
            ),
            ("Explainer:", "science.example.org", "The basics, the open questions and why it matters."),
            ("Opinion: the hype and reality of", "blog.example.net", "A sceptical look at the claims being made."),
        )
    ]
    return Scenario(
        ("web_search",),
        f"Can you look up the latest on {topic} and give me a short summary?",
        ((("web_search", {"query": f"{topic} latest news", "num_results": 3}, {"results": results}),),),
        f"Here is what the top results say about {topic}: a news round-up covers this month's developments, an "
        "explainer walks through the basics and open questions, and an opinion piece argues that some of the "
        "claims are overstated.",
    )


FILES = {
    "requirements.txt": "fastapi==0.110.0\nuvicorn[standard]==0.29.0\nsqlalchemy==2.0.29\npydantic==2.6.4\n",
    "config/settings.yaml": "server:\n  host: 0.0.0.0\n  port: 8080\ndatabase:\n  url: postgres://app@db/app\n"
    "  pool_size: 5\nlogging:\n  level: INFO\n",
    "src/main.py": 'from fastapi import FastAPI\n\napp = FastAPI()\n\n\n@app.get("/health")\ndef health() '
    '-> dict[str, str]:\n    return {"status": "ok"}\n',
}


def read_config(r: random.Random) -> Scenario:
    path, question, answer = r.choice(
        (
            (
                "config/settings.yaml",
                "which port the server listens on",
                "It listens on port 8080 on all interfaces (host 0.0.0.0).",
            ),
            ("requirements.txt", "which version of FastAPI we pin", "FastAPI is pinned to 0.110.0."),
            ("src/main.py", "what endpoints the app exposes", 'Just one: GET /health, which returns {"status": "ok"}.'),
        )
    )
    return Scenario(
        ("read_file", "write_file", "list_directory"),
        f"Can you open {path} and tell me {question}?",
        ((("read_file", {"path": path}, FILES[path]),),),
        answer,
    )


def add_dependency(r: random.Random) -> Scenario:
    dep = r.choice(("httpx==0.27.0", "redis==5.0.3", "alembic==1.13.1", "orjson==3.10.0"))
    old = FILES["requirements.txt"]
    return Scenario(
        ("read_file", "write_file", "list_directory"),
        f"Please add {dep} to requirements.txt.",
        (
            (("read_file", {"path": "requirements.txt"}, old),),
            (
                (
                    "write_file",
                    {"path": "requirements.txt", "content": old + dep + "\n"},
                    {"ok": True, "bytes_written": len(old) + len(dep) + 1},
                ),
            ),
        ),
        f"Done: requirements.txt now also pins {dep}.",
    )


def explore_project(r: random.Random) -> Scenario:
    listing = {"entries": ["src/", "src/main.py", "config/", "config/settings.yaml", "requirements.txt"]}
    return Scenario(
        ("list_directory", "read_file"),
        "What does this project do? Have a look around.",
        (
            (("list_directory", {"path": ".", "recursive": True}, listing),),
            (("read_file", {"path": "src/main.py"}, FILES["src/main.py"]),),
        ),
        "It is a small FastAPI service with a single /health endpoint, configured from config/settings.yaml.",
    )


SQL = (
    (
        "How many orders did we get from each country last month?",
        "sales",
        "SELECT c.country, COUNT(*) AS orders FROM orders o JOIN customers c ON c.id = o.customer_id "
        "WHERE o.created_at >= date_trunc('month', now()) - interval '1 month' "
        "AND o.created_at < date_trunc('month', now()) GROUP BY c.country ORDER BY orders DESC",
        ["country", "orders"],
        ("Germany", "France", "Spain"),
    ),
    (
        "Which products are running low on stock?",
        "inventory",
        "SELECT sku, name, quantity FROM stock WHERE quantity < reorder_level ORDER BY quantity",
        ["sku", "name", "quantity"],
        ("SKU-1042 Desk lamp", "SKU-2210 USB-C cable", "SKU-0099 Notebook A5"),
    ),
    (
        "How many people signed up each week this quarter?",
        "analytics",
        "SELECT date_trunc('week', created_at) AS week, COUNT(*) AS signups FROM users "
        "WHERE created_at >= date_trunc('quarter', now()) GROUP BY week ORDER BY week",
        ["week", "signups"],
        ("2025-01-06", "2025-01-13", "2025-01-20"),
    ),
)


def sql(r: random.Random) -> Scenario:
    question, db, query, columns, keys = r.choice(SQL)
    rows = [[*k.split(" ", 1), r.randint(1, 40)] if len(columns) == 3 else [k, r.randint(20, 900)] for k in keys]
    return Scenario(
        ("run_sql_query",),
        question,
        ((("run_sql_query", {"query": query, "database": db}, {"columns": columns, "rows": rows}),),),
        "Results: " + "; ".join(" ".join(str(v) for v in row) for row in rows) + ".",
    )


PEOPLE = (
    ("Priya", "priya.shah@example.com"),
    ("Tom", "tom.becker@example.com"),
    ("Amara", "amara.okafor@example.com"),
    ("Luis", "luis.ortega@example.com"),
)


def schedule(r: random.Random) -> Scenario:
    (n1, e1), (n2, e2) = r.sample(PEOPLE, 2)
    day, hour = r.randint(17, 21), r.choice((9, 10, 14, 16))
    title = r.choice(("Quarterly planning", "Design review", "1:1 catch-up", "Budget sync"))
    args = {
        "title": title,
        "start": f"2025-03-{day}T{hour:02d}:00:00",
        "end": f"2025-03-{day}T{hour:02d}:45:00",
        "attendees": [e1, e2],
    }
    return Scenario(
        ("create_calendar_event", "list_calendar_events"),
        f"Set up a 45-minute {title.lower()} with {n1} and {n2} on March {day} at {hour}:00.",
        ((("create_calendar_event", args, {"event_id": f"evt_{r.randint(10**5, 10**6)}", "status": "confirmed"}),),),
        f"Booked: {title}, March {day} from {hour}:00 to {hour}:45, with {n1} and {n2} invited.",
    )


def agenda(r: random.Random) -> Scenario:
    events = [
        {"title": t, "start": f"2025-03-17T{h}:00:00", "end": f"2025-03-17T{h}:30:00"}
        for t, h in (("Standup", "09"), ("Dentist", "13"), ("Call with Amara", "16"))
    ]
    return Scenario(
        ("list_calendar_events", "create_calendar_event"),
        "What's on my calendar on Monday?",
        ((("list_calendar_events", {"start_date": "2025-03-17", "end_date": "2025-03-17"}, {"events": events}),),),
        "Monday: standup at 9:00, the dentist at 13:00 and a call with Amara at 16:00.",
    )


SHELL = (
    (
        "How much disk space is left on this machine?",
        "df -h /",
        "Filesystem      Size  Used Avail Use% Mounted on\n/dev/nvme0n1p2  468G  391G   54G  88% /\n",
    ),
    (
        "Which process is listening on port 8080?",
        "ss -ltnp 'sport = :8080'",
        "State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n"
        'LISTEN 0      511    0.0.0.0:8080       0.0.0.0:*     users:(("node",pid=48213,fd=23))\n',
    ),
    ("What Python version is installed?", "python3 --version", "Python 3.11.8\n"),
    ("How many lines of Python are in src?", "find src -name '*.py' | xargs wc -l | tail -1", "  4127 total\n"),
)
SHELL_ANSWERS = (
    "The root filesystem has 54 GB free of 468 GB; it is 88% full, so it may be worth cleaning up soon.",
    "A node process with PID 48213 is listening on port 8080 on all interfaces.",
    "Python 3.11.8 is installed.",
    "There are 4,127 lines of Python under src.",
)


def shell(r: random.Random) -> Scenario:
    k = r.randrange(len(SHELL))
    question, command, out = SHELL[k]
    return Scenario(
        ("run_shell_command", "read_file"),
        question,
        ((("run_shell_command", {"command": command}, {"stdout": out, "stderr": "", "exit_code": 0}),),),
        SHELL_ANSWERS[k],
    )


def email(r: random.Random) -> Scenario:
    name, addr = r.choice(PEOPLE)
    what = r.choice(("the report will be a day late", "the offsite moved to Friday", "I can cover the Saturday shift"))
    return Scenario(
        ("send_email",),
        f"Email {name} to say {what}. Keep it short and friendly.",
        (
            (
                (
                    "send_email",
                    {
                        "to": [addr],
                        "subject": "Quick update",
                        "body": f"Hi {name},\n\nJust a heads-up: {what}.\n\nThanks!",
                    },
                    {"status": "sent", "message_id": f"<{r.randint(10**8, 10**9)}@mail.example.com>"},
                ),
            ),
        ),
        f"Sent: {name} now knows {what}.",
    )


def stocks(r: random.Random) -> Scenario:
    a, b = r.sample(("AAPL", "MSFT", "NVDA", "TSLA", "AMZN"), 2)
    calls = tuple(
        (
            "get_stock_quote",
            {"symbol": s},
            {"symbol": s, "price": round(r.uniform(90, 900), 2), "change_pct": round(r.uniform(-4, 4), 2)},
        )
        for s in (a, b)
    )
    return Scenario(
        ("get_stock_quote", "web_search"),
        f"How are {a} and {b} doing today?",
        (calls,),
        " ".join(f"{q['symbol']} is at ${q['price']}, {q['change_pct']:+}% today." for _, _, q in calls),
    )


def currency(r: random.Random) -> Scenario:
    amount, (src, dst, rate) = (
        r.choice((250, 1200, 75.5)),
        r.choice((("USD", "EUR", 0.92), ("GBP", "JPY", 189.4), ("EUR", "CHF", 0.96))),
    )
    return Scenario(
        ("convert_currency",),
        f"How much is {amount} {src} in {dst}?",
        (
            (
                (
                    "convert_currency",
                    {"amount": amount, "from_currency": src, "to_currency": dst},
                    {"rate": rate, "converted": round(amount * rate, 2), "to_currency": dst},
                ),
            ),
        ),
        f"{amount} {src} is about {round(amount * rate, 2)} {dst} at today's rate of {rate}.",
    )


def flights(r: random.Random) -> Scenario:
    (o, d) = r.choice((("SFO", "JFK"), ("LHR", "BCN"), ("SIN", "NRT"), ("YYZ", "MEX")))
    found = [
        {
            "flight": f"XY{r.randint(100, 999)}",
            "depart": f"{h:02d}:{m:02d}",
            "stops": s,
            "price_usd": r.randint(120, 640),
        }
        for h, m, s in ((7, 15, 0), (12, 40, 1), (18, 5, 0))
    ]
    return Scenario(
        ("search_flights", "get_current_weather"),
        f"Find me a flight from {o} to {d} on April 4 for two people.",
        (
            (
                (
                    "search_flights",
                    {"origin": o, "destination": d, "departure_date": "2025-04-04", "passengers": 2},
                    {"flights": found},
                ),
            ),
        ),
        "I found three flights: "
        + "; ".join(f"{f['flight']} at {f['depart']} ({f['stops']} stops, ${f['price_usd']})" for f in found)
        + ". Prices are per person.",
    )


SCENARIOS: tuple[Callable[[random.Random], Scenario], ...] = (
    weather_now,
    forecast_two,
    search,
    read_config,
    add_dependency,
    explore_project,
    sql,
    schedule,
    agenda,
    shell,
    email,
    stocks,
    currency,
    flights,
)

# Requests that need no tool even though tools are offered: the model should just answer.
