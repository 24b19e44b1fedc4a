"""Hand-written multi-turn conversations for the sample set.

This module owns only text. Each dialogue is four user turns with the assistant's replies to the first
three; prompts/make_sample.py cuts each one at several points to get prompts with 2-4 user turns,
ending either on a user turn or on an assistant turn that the client regenerates.
"""

from __future__ import annotations

# (user, assistant reply) x 3, then the fourth user turn.
Dialogue = tuple[tuple[str, str], tuple[str, str], tuple[str, str], str]

DIALOGUES: tuple[Dialogue, ...] = (
    (
        (
            "I get 'IndexError: list index out of range' in this loop: for i in range(len(xs)+1): print(xs[i])",
            "range(len(xs)+1) goes one step too far: the last index of a list is len(xs) - 1. Use "
            "range(len(xs)), or better, loop over the items directly with `for x in xs: print(x)`.",
        ),
        (
            "Thanks. What if I need the index too?",
            "Use enumerate: `for i, x in enumerate(xs): print(i, x)`. It gives you the index and the item "
            "together and can't run past the end.",
        ),
        (
            "Can enumerate start counting at 1?",
            "Yes, pass start: `enumerate(xs, start=1)`. Only the numbers change; it still visits every item.",
        ),
        "Great. And how would I loop over two lists side by side?",
    ),
    (
        (
            "I have three days in Lisbon in May. What should I not miss?",
            "Spend a morning in Alfama and ride tram 28, visit Belém for the tower, the monastery and the "
            "custard tarts, and take an evening walk up to a miradouro such as Senhora do Monte for sunset.",
        ),
        (
            "Is a day trip to Sintra worth it, or is that too much?",
            "It is worth it if you start early: take the train from Rossio at around 8:30, see Pena Palace "
            "first before the crowds, then Quinta da Regaleira. Drop one of the Lisbon half-days to make room.",
        ),
        (
            "Okay, let's do that. Where should we eat on the Sintra day?",
            "Grab travesseiros at Piriquita in the old town for a snack, and for dinner back in Lisbon try a "
            "tasca in Graça or Mouraria, where grilled fish and a jug of house wine are cheap and good.",
        ),
        "Can you put the whole plan into a day-by-day list?",
    ),
    (
        (
            "Can you help me write a cover letter for a junior data analyst job? I studied economics.",
            "Happily. Tell me the company, one or two projects where you worked with data, and the tools you "
            "know (Excel, SQL, Python, Tableau), and I'll draft a one-page letter around them.",
        ),
        (
            "It's for a logistics company. I built a Python model of bus delays for my thesis and I know SQL.",
            "Good material. I'd open with the thesis: it shows you can clean messy transport data and explain "
            "delays, which is exactly a logistics problem. Then SQL as your everyday tool, then why this company.",
        ),
        (
            "Sounds right. Please write the draft.",
            "Dear Hiring Manager,\n\nFor my economics thesis I modelled bus delays across 40 routes in Python, "
            "cleaning two years of GPS data to find where and why schedules slipped. I would love to bring the "
            "same curiosity to your logistics network...\n\nKind regards,\nAlex",
        ),
        "Make it a bit less formal and add a line about teamwork.",
    ),
    (
        (
            "I'm 35 and want to learn guitar. Acoustic or electric first?",
            "Either works. Electric is easier on the fingers and lighter strings make chords easier; acoustic "
            "is simpler to set up and play anywhere. Pick the one that matches the music you want to play.",
        ),
        (
            "Mostly folk and some blues.",
            "Then an acoustic makes sense. Ask the shop to set it up with light-gauge strings and a low action; "
            "that removes most of the finger pain beginners quit over.",
        ),
        (
            "How much should I practise each day?",
            "Fifteen to twenty focused minutes every day beats an hour on Sundays. Split it: five minutes of "
            "chord changes, ten on a song you like, a few minutes of strumming patterns.",
        ),
        "Which three chords should I learn first?",
    ),
    (
        (
            "Write a SQL query that lists each customer's total spend from orders(customer_id, total).",
            "SELECT customer_id, SUM(total) AS total_spend\nFROM orders\nGROUP BY customer_id\n"
            "ORDER BY total_spend DESC;",
        ),
        (
            "Now include customers with no orders, showing 0.",
            "Start from customers and LEFT JOIN orders, using COALESCE:\nSELECT c.id, COALESCE(SUM(o.total), 0) "
            "AS total_spend\nFROM customers c\nLEFT JOIN orders o ON o.customer_id = c.id\nGROUP BY c.id;",
        ),
        (
            "Only count orders from 2024 though.",
            "Put the date filter in the JOIN condition, not in WHERE, or customers without 2024 orders "
            "disappear again:\n... LEFT JOIN orders o ON o.customer_id = c.id AND o.created_at >= '2024-01-01' "
            "AND o.created_at < '2025-01-01' ...",
        ),
        "Why does putting it in WHERE drop them?",
    ),
    (
        (
            "My home espresso tastes sour. I use a 18 g dose and get 36 g out in 19 seconds.",
            "Sour and fast means under-extraction. Grind finer so the same 36 g takes 27 to 30 seconds, and "
            "make sure the machine is fully warmed up before the first shot.",
        ),
        (
            "I went finer, now it's 28 seconds but it tastes bitter and sour at the same time.",
            "Bitter and sour together usually means channeling: water finds a crack in the puck. Distribute "
            "the grounds evenly (a WDT tool or a paperclip works), then tamp level.",
        ),
        (
            "That helped a lot! Should I change the ratio too?",
            "Try stretching to 1:2.2 (about 40 g out) for a sweeter, lighter shot, or pull back to 1:1.8 for "
            "more body. Change one thing at a time and taste.",
        ),
        "What about the water? I just use tap water.",
    ),
    (
        (
            "Explain recursion like I'm new to programming.",
            "Recursion is a function solving a problem by calling itself on a smaller piece of the same "
            "problem, until the piece is so small the answer is obvious (the base case).",
        ),
        (
            "Can you show an example in Python?",
            "def countdown(n):\n    if n == 0:\n        print('Liftoff!')\n        return\n    print(n)\n"
            "    countdown(n - 1)\n\nEach call handles one number and hands the rest to a smaller call.",
        ),
        (
            "What happens if I forget the base case?",
            "The function keeps calling itself until Python runs out of stack space and raises "
            "RecursionError: maximum recursion depth exceeded, by default after about 1000 calls.",
        ),
        "Give me a small exercise to practise.",
    ),
    (
        (
            "I've run a few 10Ks. How long do I need to train for a marathon?",
            "With a 10K base, plan on 16 to 20 weeks. That leaves time to build your long run gradually to "
            "30-32 km without raising weekly distance by more than about 10 percent a week.",
        ),
        (
            "I can run four days a week. What should a week look like?",
            "One long slow run, one workout (tempo or intervals), and two easy runs. Keep about 80 percent "
            "of your running at an easy, conversational pace.",
        ),
        (
            "What should I eat during the long runs?",
            "For runs over 90 minutes take 30 to 60 g of carbohydrate an hour, such as a gel every 30 to 40 "
            "minutes with water, and practise exactly what you plan to use on race day.",
        ),
        "My left knee aches after long runs. Should I worry?",
    ),
    (
        (
            "Help me set up a monthly budget. I take home 3,200 a month.",
            "A simple starting point is 50/30/20: about 1,600 for needs (rent, bills, groceries), 960 for "
            "wants, and 640 for savings or paying down debt. We can adjust once we know your fixed costs.",
        ),
        (
            "Rent is 1,250 and bills are about 180.",
            "That is 1,430 of needs before groceries. If groceries are around 300, needs come to 1,730, a "
            "little over half, so trim wants to about 830 and keep the 640 for savings.",
        ),
        (
            "I also have a credit card with 2,400 on it at 24%.",
            "Pay that first: 24% is more than any savings account earns. Put most of the 640 toward the card "
            "and it is gone in about four months, while keeping a small emergency buffer.",
        ),
        "Can you turn this into a table I can copy into a spreadsheet?",
    ),
    (
        (
            "How do I run Postgres and my Flask app together with Docker Compose?",
            "Define two services in docker-compose.yml: db using the postgres:16 image with a named volume and "
            "POSTGRES_PASSWORD set, and web built from your Dockerfile, with depends_on: db and the database URL "
            "pointing at host 'db'.",
        ),
        (
            "The app starts before Postgres is ready and crashes.",
            "depends_on only waits for the container to start. Add a healthcheck to db using pg_isready and "
            "use `depends_on: db: condition: service_healthy` on web.",
        ),
        (
            "Works now. How do I keep the data when I run docker compose down?",
            "Data in a named volume survives `docker compose down`; only `down -v` deletes volumes. Mount "
            "the volume at /var/lib/postgresql/data.",
        ),
        "How can I load a SQL dump into it the first time it starts?",
    ),
    (
        (
            "My landlord hasn't fixed a leaking bathroom tap for three weeks. Help me write a polite email.",
            "Subject: Leaking bathroom tap at Flat 4\n\nHello Mr Hughes,\n\nI reported the leaking bathroom "
            "tap on 2 March and it is still dripping constantly. Could you let me know when a plumber can come?"
            "\n\nThank you,\nDana",
        ),
        (
            "Good, but it also left a stain on the ceiling downstairs.",
            "I'd add: 'The leak has now caused a stain on the ceiling of the flat below, so I am worried the "
            "damage is spreading.' That makes the urgency clear without sounding angry.",
        ),
        (
            "He still hasn't replied after a week. What now?",
            "Send a firmer follow-up that refers to the first email, asks for a repair date within seven days, "
            "and keep copies and photos. Check your local tenant rules on repair deadlines.",
        ),
        "Please write that firmer follow-up.",
    ),
    (
        (
            "Let's write a short story together. A lighthouse on an island where the light went out years ago.",
            "The light on Carrow Rock had been dark for eleven years when Mira rowed out with a toolbox and a "
            "letter from a grandfather she had never met. The door was unlocked. Someone had been winding the "
            "clock.",
        ),
        (
            "Who has been winding the clock?",
            "A boy of about twelve named Teo, who rows over from the mainland every Sunday because his mother "
            "once told him the lighthouse keeper paid in stories. He has been waiting for the keeper to come back.",
        ),
        (
            "Nice. Mira finds something in the letter about Teo's mother.",
            "The letter's last page names her: 'If Ana's child ever comes looking, tell him the light was "
            "always meant for them.' Mira folds it away and looks at Teo, who is pretending not to watch her.",
        ),
        "Write the ending, about 150 words.",
    ),
    (
        (
            "What does a p-value of 0.03 actually mean?",
            "If there were truly no effect, you would see data at least this extreme about 3% of the time. "
            "It is not the probability that the null hypothesis is true.",
        ),
        (
            "So is 0.03 strong evidence?",
            "Modest evidence. It passes the usual 0.05 threshold, but with small samples or many tests a value "
            "like that appears by chance fairly often. Look at the effect size and its confidence interval.",
        ),
        (
            "What's the difference between statistical and practical significance?",
            "Statistical significance says an effect is unlikely to be zero; practical significance asks "
            "whether it is big enough to matter. A huge study can make a 0.1% improvement 'significant'.",
        ),
        "Can you give a concrete example with numbers?",
    ),
    (
        (
            "My monstera has brown crispy edges on its leaves. What am I doing wrong?",
            "Crispy brown edges usually mean the air is too dry or watering is uneven. Water thoroughly when "
            "the top 5 cm of soil is dry, and keep it away from radiators.",
        ),
        (
            "It's next to a radiator, actually. Where should it go?",
            "Bright, indirect light a metre or two from a window, and at least a metre from the radiator. "
            "East-facing rooms are ideal; direct afternoon sun can scorch the leaves.",
        ),
        (
            "Should I cut off the brown parts?",
            "You can trim just the brown edge with clean scissors, following the leaf's shape. The brown "
            "tissue will not recover, but trimming won't hurt the plant.",
        ),
        "How do I know when it needs a bigger pot?",
    ),
)

DIALOGUE_SYSTEM = (
    "You are a helpful assistant. Keep answers focused and practical.",
    "You are a warm, encouraging assistant. Use short paragraphs.",
)
