"""The benchmarks' synthetic memory: seeded daily notes of varied English, tiny notes, perturbed copies, queries.

Deterministic per (seed, note number), so every run and every benchmark sees the same text. `perturb` swaps
words for same-length words of the same category, so a copy's chunks keep the original's line ranges (chunk
boundaries depend only on line lengths).
"""

from __future__ import annotations

import random
import re
from datetime import date, timedelta
from pathlib import Path

# Categories whose words section 3 swaps for same-length words of the same category, to make perturbed copies
# whose chunks keep the same line ranges (chunk boundaries depend only on line lengths).
SWAP = {
    "person": "Dana Omar Sven Ravi Hiro Zara Ines Theo Marco Priya Kenji Lucia Aisha Tomas Elena Nadia Felix "
    "Jonas Mateo Yusuf Chloe Ingrid Amelia Rafael Soraya Dmitri Leilani Beatriz Gunnar".split(),
    "city": "Oslo Rome Kyiv Lima Paris Osaka Porto Turin Quito Berlin Lisbon Madrid Vienna Zurich Dublin Warsaw "
    "Nairobi Seville Toronto Glasgow".split(),
    "system": "billing checkout payments ledger gateway reports mailer search invoices catalog scheduler "
    "profiles".split(),
    "tool": "Postgres Kafka Redis Nginx Terraform Docker Grafana Sentry Airflow Prefect Ansible Jenkins".split(),
    "food": "ramen sushi tacos pasta curry pho falafel risotto paella dumplings gnocchi".split(),
    "drink": "coffee matcha oolong cocoa chai espresso lemonade".split(),
    "weekday": "Monday Friday Sunday Tuesday Thursday Saturday Wednesday".split(),
    "month": "March April June July August October November".split(),
}

_SWAP_WORD = {w: cat for cat, words in SWAP.items() for w in words}

ERRORS = [
    "ERR_SSL_PROTOCOL",
    "ECONNRESET",
    "OOMKilled",
    "504 Gateway Timeout",
    "deadlock detected",
    "disk quota exceeded",
    "certificate has expired",
    "too many open files",
    "CrashLoopBackOff",
]

PLACES = ["river path", "old harbour", "city park", "canal towpath", "hill trail", "beach promenade"]

TOPICS = [
    "habit formation",
    "distributed consensus",
    "sourdough hydration",
    "the history of maps",
    "negotiation",
    "sleep and memory",
    "urban gardening",
    "compound interest",
    "Roman aqueducts",
]

BOOKS = [
    "Thinking in Systems",
    "The Design of Everyday Things",
    "Salt Fat Acid Heat",
    "Deep Work",
    "The Overstory",
    "Designing Data-Intensive Applications",
    "A Pattern Language",
]

ITEMS = [
    "a fountain pen",
    "noise-cancelling headphones",
    "a cast-iron pan",
    "a board game",
    "hiking boots",
    "a ceramic teapot",
    "a puzzle of 1000 pieces",
    "a subscription to a bakery",
]

ALLERGENS = ["peanuts", "shellfish", "gluten", "sesame", "kiwi", "lactose"]

FEATURES = ["TLS 1.0", "legacy webhooks", "the v1 API", "basic auth", "SOAP endpoints", "IPv4-only routing"]

ACTIVITIES = [
    "swimming lessons",
    "violin practice",
    "football training",
    "a climbing session",
    "a chess club",
    "a pottery class",
]

CAUSES = [
    "race condition in the retry loop",
    "missing index on created_at",
    "stale DNS cache",
    "timezone bug in the cron parser",
    "connection pool that never shrank",
    "off-by-one in pagination",
]

WEATHER = ["rainy and cold", "foggy all day", "unusually warm", "windy with hail", "sunny but freezing"]

GAMES = ["Carcassonne", "Azul", "Codenames", "Wingspan", "Ticket to Ride", "Dixit"]

FACTS = [
    "octopuses have three hearts",
    "the Eiffel Tower grows in summer",
    "honey never spoils",
    "bananas are berries but strawberries are not",
    "a day on Venus is longer than its year",
    "the first computer bug was a real moth",
]

HEADINGS = [
    "Work",
    "Family",
    "Health",
    "Reading",
    "Errands",
    "Ideas",
    "Follow-ups",
    "Meetings",
    "Money",
    "Travel",
    "Home",
    "Learning",
]

TEMPLATES = [
    "{person} said the {system} deploy failed with `{error}` right after the {tool} upgrade.",
    "Decided to move the {system} review to {weekday} at {time} so {person} can join from {city}.",
    "{person} prefers {drink} in the morning and is not really talkative before {time}.",
    "Bought {item} for {person}'s birthday; it cost {price} euros at the shop near the {place}.",
    "Reminder: renew the passport before {month} {day}; the consulate in {city} needs two weeks.",
    "The {system} p95 latency went from {n} ms to {m} ms after we turned on {tool} connection pooling.",
    'Read {pages} pages of "{book}"; the chapter about {topic} was the best part so far.',
    "{person} recommended a small {food} place in {city}, said the lunch menu is worth the queue.",
    "Ran {km} km along the {place} in {minutes} minutes; the left knee felt fine this time.",
    "Open question: should the {system} service keep raw events for {days} days or only {days2}?",
    "TODO: ask {person} about the {system} budget, the last estimate was {price} euros per month.",
    "{person} is allergic to {allergen}, so order the {food} without it next time we eat together.",
    "Paired with {person} on the {system} bug; the root cause was a {cause}.",
    "Call with the {tool} vendor: they will drop support for {feature} in {month}.",
    "The kids have {activity} on {weekday}; {person} picks them up at {time}.",
    "Learned today that {fact}, which {person} did not believe at first.",
    "Plan for the weekend: {activity} with {person}, then {food} for dinner in {city}.",
    "The {tool} migration is {percent}% done; the remaining jobs are blocked on {person}'s review.",
    "Weather in {city} was {weather}, so we stayed in and played {game} until late.",
    "Spent {minutes} minutes on the {system} runbook; it still assumes {tool} runs on a single host.",
    "{person} will be on leave from {month} {day}, so {person2} owns the {system} on-call rotation.",
    "Note to self: {drink} after {time} ruins my sleep, switch to herbal tea in the afternoon.",
    "Grocery list: {food} ingredients, oat milk, lemons, {drink}, and batteries for the smoke alarm.",
    "Budget check: spent {price} euros on {item}; still {percent}% left for the {month} trip to {city}.",
    "Retro notes: the {system} incident lasted {minutes} minutes and paged {person} three times.",
    "Idea: write a small script that summarises {tool} alerts per week and posts them to the team chat.",
    "{person} and {person2} disagree about moving {system} off {tool}; decision postponed to {weekday}.",
    "Dentist appointment on {weekday} {month} {day} at {time}; remember to bring the insurance card.",
]


def _fill(rng: random.Random, template: str) -> str:
    person, person2 = rng.sample(SWAP["person"], 2)
    slots = dict(
        person=person,
        person2=person2,
        city=rng.choice(SWAP["city"]),
        system=rng.choice(SWAP["system"]),
        tool=rng.choice(SWAP["tool"]),
        food=rng.choice(SWAP["food"]),
        drink=rng.choice(SWAP["drink"]),
        weekday=rng.choice(SWAP["weekday"]),
        month=rng.choice(SWAP["month"]),
        error=rng.choice(ERRORS),
        place=rng.choice(PLACES),
        topic=rng.choice(TOPICS),
        book=rng.choice(BOOKS),
        item=rng.choice(ITEMS),
        allergen=rng.choice(ALLERGENS),
        feature=rng.choice(FEATURES),
        activity=rng.choice(ACTIVITIES),
        cause=rng.choice(CAUSES),
        weather=rng.choice(WEATHER),
        game=rng.choice(GAMES),
        fact=rng.choice(FACTS),
        time=f"{rng.randint(7, 21)}:{rng.choice(['00', '15', '30', '45'])}",
        price=rng.randint(12, 2400),
        n=rng.randint(120, 900),
        m=rng.randint(40, 300),
        pages=rng.randint(8, 80),
        km=rng.randint(3, 21),
        minutes=rng.randint(15, 140),
        days=rng.choice([7, 14, 30, 90]),
        days2=rng.choice([180, 365]),
        day=rng.randint(1, 28),
        percent=rng.randint(5, 95),
    )
    return template.format(**slots)


def note_date(i: int) -> date:
    return date(2025, 1, 1) + timedelta(days=i)


def daily_note(seed: int, i: int) -> str:
    """Note number i: a date heading and 4-6 sections, about 40 lines in all."""
    rng = random.Random(seed * 1_000_003 + i)
    d = note_date(i)
    lines = [f"# {d.isoformat()} ({d.strftime('%A')})", ""]
    for heading in rng.sample(HEADINGS, rng.randint(4, 6)):
        lines.append(f"## {heading}")
        for _ in range(rng.randint(5, 7)):
            lines.append("- " + _fill(rng, rng.choice(TEMPLATES)))
        lines.append("")
    return "\n".join(lines) + "\n"


_SWAP_RE = re.compile(r"\b(" + "|".join(sorted(_SWAP_WORD, key=len, reverse=True)) + r")\b")


def swap_map(seed: int, variant: int) -> dict[str, str]:
    """For one variant: each swappable word -> a word of the same category and the same length."""
    rng = random.Random(seed * 7_919 + variant)
    out: dict[str, str] = {}
    for words in SWAP.values():
        by_len: dict[int, list[str]] = {}
        for w in words:
            by_len.setdefault(len(w), []).append(w)
        for group in by_len.values():
            shuffled = group[:]
            rng.shuffle(shuffled)
            out.update(zip(group, shuffled))
    return out


def perturb(text: str, mapping: dict[str, str]) -> str:
    return _SWAP_RE.sub(lambda m: mapping[m[1]], text)


def tiny_note(i: int) -> tuple[str, str]:
    rng = random.Random(i)
    d = date(2024, 1, 1) + timedelta(days=i % 1000)
    rel = f"memory/{d.year}/{d.month:02d}/note-{i}.md"
    return rel, f"# Note {i}\n\n- {_fill(rng, rng.choice(TEMPLATES))}\n"


QUERY_TEMPLATES = [
    "what did {person} say about the {system} deploy",
    "{error}",
    "why did {system} fail with {error}",
    "when is {person}'s birthday and what did I buy",
    "{food} recommendation in {city}",
    "how far did I run along the {place}",
    "what is {person} allergic to",
    "which vendor drops support for {feature}",
    "{system} p95 latency after {tool} change",
    "book chapter about {topic}",
    "{system} budget estimate",
    "who picks up the kids after {activity}",
    "root cause of the {system} bug",
    "{tool} migration progress",
    "what does {person} drink in the morning",
    "passport renewal deadline {city}",
    "plans for the weekend with {person}",
    "who is on call for {system} while {person} is on leave",
    "dentist appointment",
    "how long did the {system} incident last",
    "something interesting I learned about animals",
    "what made the website slow last month",
    "gift ideas for a friend who likes cooking",
    "should we keep raw events or delete them sooner",
    "what did we decide about moving off {tool}",
    "retention policy",
    "sleep problems caffeine",
    "what is it",
    "{person} {person2} disagreement",
    "I need to remember the grocery list and what was on it before the trip to {city} in {month}",
]


def make_queries(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [
        _fill(
            rng, QUERY_TEMPLATES[i % len(QUERY_TEMPLATES)] if i < len(QUERY_TEMPLATES) else rng.choice(QUERY_TEMPLATES)
        )
        for i in range(n)
    ]


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
