"""Hand-written building blocks for the chat and code prompts of the sample set.

This module owns only text: lists that prompts/make_sample.py combines into single-turn prompts. It
holds no logic, so the sample stays reviewable as prose and changes to it show up as plain diffs.
"""

from __future__ import annotations

CHAT_SYSTEM = (
    "You are a helpful, knowledgeable assistant. Answer clearly and concisely.",
    "You are a patient tutor. Explain step by step and check for understanding.",
    "You are a friendly assistant. Keep answers under 200 words unless asked for more.",
    "You are an expert editor. Prefer plain language and short sentences.",
    "You are a practical assistant for everyday questions. Give concrete, actionable advice.",
)

# Replies a bad earlier model gave; the final assistant turn is regenerated.
STUB_REPLIES = ("OK.", "Sure!", "I'm not sure.", "Here you go.", "Yes.")

CONCEPTS = (
    "how vaccines train the immune system",
    "why the sky is blue",
    "how public-key cryptography works",
    "what inflation is and why central banks raise interest rates",
    "how a language model predicts the next word",
    "the difference between weather and climate",
    "how GPS works out where you are",
    "why bread dough rises",
    "how compound interest works",
    "what a black hole is",
    "how noise-cancelling headphones work",
    "what CRISPR gene editing does",
    "how tides work",
    "why we have leap years",
    "how index funds work",
    "what the placebo effect is",
    "how photosynthesis stores energy",
    "how an electric motor turns",
)

AUDIENCES = (
    "a ten-year-old",
    "a high-school student",
    "someone with no science background",
    "a busy executive, in three sentences",
    "a first-year university student",
    "my grandmother",
    "a software engineer",
)

COMPARISONS = (
    ("renting", "buying a home", "for someone who may move within five years"),
    ("a Roth IRA", "a traditional IRA", "for a 28-year-old with a modest income"),
    ("learning Spanish", "learning Mandarin", "for a career in international business"),
    ("an electric car", "a hybrid", "for a family that often drives long distances"),
    ("a standing desk", "a regular desk", "for someone with lower back pain"),
    ("running", "cycling", "for losing weight with bad knees"),
    ("a gas stove", "an induction cooktop", "in a small apartment"),
    ("freelancing", "a full-time job", "as a graphic designer"),
    ("paper books", "an e-reader", "for someone who reads fifty books a year"),
    ("PostgreSQL", "MongoDB", "for a small online shop"),
)

WRITING = (
    ("a short poem", "a lighthouse keeper on his last night before retiring"),
    ("a haiku", "the first snow of winter"),
    ("a limerick", "a cat that refuses to come inside"),
    ("a 100-word story", "a city at five in the morning"),
    ("a toast for my sister's wedding", "how she and her husband met on a delayed train"),
    ("a thank-you note", "a neighbour who watered my plants for a month"),
    ("a product description", "a reusable water bottle made from recycled steel"),
    ("a persuasive paragraph", "why every town should have a public library"),
    ("a short speech", "my team finishing a project that was six months late"),
    ("a bedtime story", "a small dragon who is afraid of the dark"),
    ("a LinkedIn post", "completing my first year as a nurse"),
    ("a sonnet", "an old bicycle left in a garage"),
)

HOW_TO = (
    "How do I get red wine out of a wool carpet?",
    "My sourdough starter smells like nail polish remover. Is it dead, and how do I fix it?",
    "What should I pack for a four-day hike in the Scottish Highlands in October?",
    "How can I politely decline a wedding invitation from a coworker?",
    "My tomato plant's leaves are turning yellow from the bottom up. What's going on?",
    "How do I prepare for a behavioural interview at a large tech company?",
    "What's a good weekly workout plan for a beginner with thirty minutes a day?",
    "How do I negotiate a higher salary when I already have an offer in hand?",
    "Can you suggest a cheap vegetarian meal plan for one week for two people?",
    "How should I store fresh herbs so they last longer?",
    "What's the best way to learn touch typing as an adult?",
    "How can I tell whether a used car has been in a flood?",
    "What questions should I ask a landlord before signing a lease?",
    "How do I start journaling and actually keep it up?",
)

CITIES = (
    "Lisbon",
    "Kyoto",
    "Mexico City",
    "Edinburgh",
    "Cape Town",
    "Vancouver",
    "Istanbul",
    "Hanoi",
    "Buenos Aires",
    "Prague",
)
TRAVELLERS = ("a couple", "a family with two young kids", "a solo traveller", "two friends in their 20s")
BUDGETS = ("tight", "moderate", "generous")

PASSAGES = (
    "The city council voted on Tuesday to convert two lanes of Harbour Street into protected bike lanes. "
    "Supporters argued that the change would reduce accidents and encourage residents to leave their cars "
    "at home, pointing to a 30 percent drop in collisions after a similar project on Mill Road. Local "
    "business owners were divided: cafes welcomed the expected rise in foot traffic, while several "
    "delivery companies warned that loading would become harder. Construction begins in March and is "
    "expected to take four months, during which the street will stay open to buses.",
    "Researchers studied 1,200 adults over ten years and found that people who walked at least 7,000 steps "
    "a day had a 50 to 70 percent lower risk of dying during the study period than those who walked less. "
    "Walking speed made little difference once the total number of steps was taken into account. The "
    "authors caution that the study was observational, so it cannot prove that walking itself caused the "
    "lower risk, and they call for trials that assign people to different activity levels.",
    "Our quarterly results show revenue of 4.2 million dollars, up 12 percent on the same quarter last "
    "year, mainly thanks to the new subscription plan. Costs rose faster, by 18 percent, because we hired "
    "eleven engineers and moved to a larger office. As a result the operating margin fell from 9 to 5 "
    "percent. For the next quarter we plan to slow hiring, renegotiate our cloud contract and launch the "
    "annual billing option that customers have been asking for.",
    "Honeybees communicate the location of food through the waggle dance. A forager returning to the hive "
    "runs in a straight line while shaking her body, then loops back and repeats. The angle of the run "
    "relative to vertical tells the other bees the direction of the food relative to the sun, and the "
    "length of the waggle run tells them the distance. Bees that follow the dance then fly out and find "
    "the flowers with surprising accuracy, even several kilometres away.",
)

LANGUAGES = ("French", "Spanish", "German", "Japanese", "Portuguese", "Italian")
SENTENCES = (
    "The meeting has been moved to Thursday afternoon because the client's flight was delayed.",
    "Could you recommend a quiet restaurant near the train station?",
    "Please keep your luggage with you at all times.",
    "I've been learning to cook, and last night I made bread for the first time.",
    "The museum is closed on Mondays, but the garden is open every day.",
    "Thank you for your patience while we fix the problem.",
    "We're out of milk, so I'll stop by the shop on the way home.",
    "Your order has shipped and should arrive within three working days.",
)

CODE_SYSTEM = (
    "You are a senior software engineer. Give working code first, then a short explanation.",
    "You are a careful code reviewer. Point out bugs and edge cases before style issues.",
    "You are a programming assistant. Prefer the standard library and idiomatic code.",
)

CODE_LANGUAGES = ("Python", "TypeScript", "Go", "Rust", "Java", "C++")
CODE_TASKS = (
    "checks whether a string is a valid IPv4 address",
    "merges two sorted lists into one sorted list",
    "parses a duration like '1h30m15s' into a number of seconds",
    "finds the longest common prefix of a list of strings",
    "rotates a square matrix 90 degrees clockwise in place",
    "groups a list of words into sets of anagrams",
    "computes the Levenshtein distance between two strings",
    "validates a credit card number with the Luhn algorithm",
    "converts a Roman numeral to an integer",
    "removes duplicates from a list while keeping the original order",
    "flattens an arbitrarily nested list",
    "returns the k most frequent elements of an array",
    "checks whether the parentheses, brackets and braces in a string are balanced",
    "converts a snake_case identifier to camelCase",
    "splits an iterable into batches of size n",
    "implements an LRU cache with a fixed capacity",
)
CODE_EXTRAS = (
    "Include type annotations and a docstring.",
    "Add a few unit tests.",
    "Explain its time and space complexity.",
    "Handle edge cases such as empty input.",
    "Keep it short and readable.",
    "",
)

# (language, symptom, code)
BUGGY = (
    (
        "python",
        "should return the average of the list but crashes on some inputs",
        "def average(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)",
    ),
    (
        "python",
        "is supposed to add an item to a fresh list each call, but items pile up between calls",
        "def add_item(item, items=[]):\n    items.append(item)\n    return items",
    ),
    (
        "javascript",
        "prints 3 three times instead of 0, 1, 2",
        "for (var i = 0; i < 3; i++) {\n  setTimeout(() => console.log(i), 100);\n}",
    ),
    (
        "python",
        "should find the index of target with binary search but loops forever",
        "def search(xs, target):\n    lo, hi = 0, len(xs) - 1\n    while lo <= hi:\n"
        "        mid = (lo + hi) // 2\n        if xs[mid] < target:\n            lo = mid\n"
        "        elif xs[mid] > target:\n            hi = mid\n        else:\n            return mid\n"
        "    return -1",
    ),
    (
        "go",
        "sometimes reports a wrong total when run with many goroutines",
        "var total int\nvar wg sync.WaitGroup\nfor i := 0; i < 1000; i++ {\n\twg.Add(1)\n"
        "\tgo func() {\n\t\tdefer wg.Done()\n\t\ttotal++\n\t}()\n}\nwg.Wait()\nfmt.Println(total)",
    ),
    (
        "sql",
        "returns customers without orders twice and misses some with orders",
        "SELECT c.name, COUNT(*) AS orders\nFROM customers c\nLEFT JOIN orders o ON o.customer_id = c.id\n"
        "WHERE o.status = 'paid'\nGROUP BY c.name;",
    ),
)

EXPLAIN = (
    ("python", "print(sorted(words, key=lambda w: (-len(w), w))[:3])"),
    ("bash", "find . -name '*.log' -mtime +7 -print0 | xargs -0 gzip"),
    (
        "python",
        "from functools import reduce\nresult = reduce(lambda acc, x: acc | {x: acc.get(x, 0) + 1}, text, {})",
    ),
    (
        "javascript",
        "const debounce = (fn, ms) => {\n  let t;\n  return (...a) => { clearTimeout(t); t = "
        "setTimeout(() => fn(...a), ms); };\n};",
    ),
    ("rust", "let evens: Vec<u32> = (1..=20).filter(|n| n % 2 == 0).map(|n| n * n).collect();"),
    ("sql", "SELECT department, AVG(salary) OVER (PARTITION BY department) AS avg_salary, name\nFROM employees;"),
)

SQL_SCHEMA = (
    "customers(id, name, email, country, created_at), orders(id, customer_id, total_cents, status, "
    "created_at), order_items(order_id, product_id, quantity, unit_price_cents), products(id, name, category)"
)
SQL_REQUESTS = (
    "lists the ten customers who spent the most in 2024",
    "shows monthly revenue for the last twelve months",
    "finds products that have never been ordered",
    "returns each country's number of customers and average order value",
    "finds customers whose first order was in the last 30 days",
    "lists the best-selling product in each category",
    "computes the share of orders that were refunded, per month",
    "finds customers who ordered in January but not in February",
)

SHELL_TASKS = (
    "Write a bash one-liner that finds the 10 largest files under the current directory.",
    "How do I rename every .jpeg file in a folder to .jpg from the command line?",
    "Write a shell command that counts how many times each IP address appears in access.log.",
    "Write a regular expression that matches a UK postcode such as SW1A 1AA.",
    "Write a regular expression that matches dates in YYYY-MM-DD format and rejects month 13.",
    "How do I undo the last git commit but keep the changes in my working tree?",
    "How can I see which process is listening on port 5432 on Linux?",
    "Write a cron expression that runs a job at 02:30 on weekdays only.",
)

DESIGN = (
    "How would you design a URL shortener that handles 10,000 writes a second? Cover storage, id "
    "generation and caching.",
    "How would you design rate limiting for a public REST API? Compare token bucket and sliding window.",
    "How would you structure a Python project that has a CLI, a library and a web API sharing code?",
    "How would you design a job queue with retries and dead-lettering on top of PostgreSQL?",
    "What's a good way to version a REST API, and how do you retire old versions?",
    "How would you design the database schema for a library's book lending system?",
)

CONVERT_SNIPPET = (
    "def word_counts(path):\n    counts = {}\n    with open(path) as f:\n        for line in f:\n"
    "            for word in line.split():\n                counts[word] = counts.get(word, 0) + 1\n"
    "    return sorted(counts.items(), key=lambda kv: kv[1], reverse=True)"
)
