"""bench/search.py's corpus: deterministic memory and query text over 200 topics, synthetic
embeddings clustered like sentence embeddings, and the users' Zipf-sized shares of it (also
used by bench/scale.py's search phase)."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

import numpy as np

from app.embedding.base import Owner
from app.scoring.procedural import normalise_pattern

TENANT = "bench-search"
BIG_USER = 2000  # users above this many memories are reported apart
SHARED_DIRECTION = 0.4  # weight of the direction all centroids share (cross-topic cosine)
NOISE_NORM = math.sqrt(0.6)  # |noise| / |centroid|: same-topic cosine ≈ 1 / (1 + 0.6)

# -- text ------------------------------------------------------------------------------------

PEOPLE = [
    "Bruno", "Chiara", "Dmitri", "Esther", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal",
    "Lucia", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Ulla",
    "Vera", "Wen", "Yusuf", "Zoe",
]  # fmt: skip
CITIES = [
    "Lisbon", "Berlin", "Austin", "Nairobi", "Oslo", "Madrid", "Toronto", "Melbourne",
    "Munich", "Prague", "Warsaw", "Boston",
]  # fmt: skip
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip
SUBJECTS: dict[str, list[str]] = {
    "hobby": [
        "bouldering", "sourdough baking", "trail running", "chess openings", "birdwatching",
        "watercolour painting", "jazz piano", "sea kayaking", "pottery", "amateur astronomy",
        "beekeeping", "salsa dancing", "woodworking", "fly fishing", "urban sketching",
        "mountain biking", "bonsai", "film photography", "rock climbing", "surfing",
        "knitting", "homebrewing", "calligraphy", "archery", "scuba diving", "vegetable gardening",
        "marathon training", "yoga", "fencing", "origami", "bike touring", "skateboarding",
        "violin lessons", "poetry writing", "board games", "geocaching", "ice skating",
        "mushroom foraging", "improv comedy", "model trains",
    ],
    "tool": [
        "Postgres", "Redis", "Kubernetes", "Terraform", "Grafana", "Kafka", "FastAPI", "React",
        "Django", "Airflow", "Elasticsearch", "Prometheus", "Ansible", "Jenkins", "GitLab",
        "Snowflake", "Spark", "RabbitMQ", "Nginx", "Vault", "Docker", "Helm", "Datadog",
        "Sentry", "Celery", "Flutter", "Svelte", "Rust", "Golang", "TypeScript", "PyTorch",
        "Pandas", "BigQuery", "DynamoDB", "Cassandra", "ClickHouse", "Istio", "ArgoCD",
        "Pulumi", "Tailscale",
    ],
    "place": [
        "Porto", "Kyoto", "Lima", "Reykjavik", "Marrakesh", "Hanoi", "Montreal", "Tbilisi",
        "Cape Town", "Valparaiso", "Ljubljana", "Seville", "Edinburgh", "Tallinn", "Krakow",
        "Istanbul", "Bogota", "Hobart", "Queenstown", "Vancouver", "Lyon", "Naples", "Athens",
        "Helsinki", "Dublin", "Seoul", "Taipei", "Singapore", "Mumbai", "Cairo", "Zanzibar",
        "Havana", "Cusco", "Bergen", "Tromso", "Granada", "Dubrovnik", "Bruges", "Salzburg",
        "Kathmandu",
    ],
    "food": [
        "vegan curry", "gluten-free bread", "ramen", "espresso", "green tea", "keto meals",
        "intermittent fasting", "sushi", "dark chocolate", "oat milk", "kimchi", "tacos",
        "neapolitan pizza", "lentil soup", "protein shakes", "smoothies", "paella", "dumplings",
        "cheese boards", "mezze", "pho", "falafel", "risotto", "barbecue ribs", "granola",
        "matcha", "craft beer", "natural wine", "cold brew", "tofu stir fry", "peanuts",
        "lactose", "sugar-free snacks", "fermented foods", "meal prep", "mediterranean diet",
        "bagels", "croissants", "hot sauce", "shellfish",
    ],
    "project": [
        "billing migration", "onboarding flow", "mobile app redesign", "quarterly roadmap",
        "hiring pipeline", "churn analysis", "data warehouse", "security audit", "pricing page",
        "API rate limits", "search relevance", "payment gateway", "incident review",
        "design system", "analytics dashboard", "invoice automation", "SSO rollout",
        "GDPR compliance", "performance review", "sales forecast", "partner integration",
        "support backlog", "release train", "feature flags", "load testing",
        "cloud cost optimisation", "accessibility audit", "localisation", "email campaign",
        "referral program", "inventory sync", "fraud detection", "recommendation engine",
        "chat widget", "status page", "backup policy", "observability stack",
        "vendor contract", "offsite planning", "board presentation",
    ],
}  # fmt: skip
MEMORY_TEMPLATES: dict[str, list[tuple[str, str]]] = {
    "hobby": [
        ("preference", "I really enjoy {s} on {d} mornings, usually for about {n} minutes."),
        ("goal", "My goal this year is to get better at {s}; {p} offered to coach me."),
        ("event", "Spent {n} minutes on {s} with {p} near {c} last {d}."),
        ("fact", "{p} got me into {s} back in {m}; we meet every other {d}."),
        ("todo", "Remind me to buy new gear for {s} before the {m} trip to {c}."),
        ("decision", "Decided to join a {s} club in {c}, membership is {n} euros a year."),
    ],
    "tool": [
        ("decision", "We decided to move {p}'s team service to {s} by {m}."),
        ("fact", "The {s} cluster in {c} handles about {n} requests per second."),
        ("preference", "I prefer {s} over {t} for new services; {p} agrees."),
        ("todo", "Upgrade {s} on the staging cluster before {d}, ticket {n}."),
        ("event", "{s} had an outage on {d} that lasted {n} minutes; {p} wrote the postmortem."),
        ("goal", "Goal: cut our {s} bill by {n} percent before {m}."),
    ],
    "place": [
        ("event", "Flew to {s} on {d} with {p}; the hotel was {n} euros a night."),
        ("preference", "In {s} I prefer staying near the old town, under {n} euros a night."),
        ("todo", "Book the train from {s} to {c} for the {m} conference."),
        ("fact", "{p} lives in {s} and works remotely for a company in {c}."),
        ("goal", "I want to spend {n} days in {s} next {m} and learn some of the language."),
        ("decision", "We chose {s} for the team offsite in {m}; the budget is {n} euros."),
    ],
    "food": [
        ("preference", "I love {s}, especially at the place {p} recommended in {c}."),
        ("fact", "{p} cannot have {s}; keep that in mind for the {m} dinner."),
        ("event", "Made {s} for {n} friends on {d}; {p} brought dessert."),
        ("goal", "Trying to have {s} at most {n} times a month."),
        ("todo", "Order {s} for the team lunch on {d}, about {n} people."),
        ("decision", "Decided to switch to {s} after talking to {p} in {m}."),
    ],
    "project": [
        ("decision", "For the {s} we decided to use {t} and ship by {m}."),
        ("todo", "Send {p} the {s} update before {d}'s standup."),
        ("fact", "The {s} is owned by {p}'s team in {c} and has {n} open tickets."),
        ("goal", "Goal for {m}: finish the {s} with fewer than {n} open bugs."),
        ("event", "Kick-off for the {s} on {d} with {p} ran {n} minutes over."),
        ("preference", "{p} prefers async updates on the {s}, weekly on {d}."),
    ],
}
QUERY_TEMPLATES: dict[str, list[str]] = {
    "hobby": [
        "what are my plans for {s}",
        "when did I last go {s} with {p}?",
        "any notes about {s}",
        "who is coaching me in {s}",
        "how often do I do {s}",
    ],
    "tool": [
        "what did we decide about {s}?",
        "details of the last {s} outage",
        "how much traffic does {s} handle",
        "plans for upgrading {s}",
        "what does {p} think of {s}",
    ],
    "place": [
        "when am I travelling to {s}?",
        "hotel budget for {s}",
        "who do I know in {s}",
        "is the offsite in {s}",
        "what do I want to do in {s}",
    ],
    "food": [
        "does anyone have a problem with {s}?",
        "where to get good {s}",
        "how often should I have {s}",
        "team lunch order with {s}",
        "what did {p} say about {s}",
    ],
    "project": [
        "status of the {s}",
        "who owns the {s}?",
        "deadline for the {s}",
        "next steps on the {s} with {p}",
        "what did we decide for the {s}",
    ],
}
ASSISTANT_LINES = [
    "Sure, I'll keep that in mind.",
    "Got it. Anything else you want me to note?",
    "Noted, I'll remind you when it comes up.",
    "Understood.",
]
TOPICS: list[tuple[str, str]] = [
    (cat, subject) for cat, names in SUBJECTS.items() for subject in names
]


class TextGen:
    """Deterministic sentences about a topic (an index into TOPICS)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def _fill(self, template: str, topic: int) -> str:
        rng = self.rng
        subject = TOPICS[topic][1]
        return template.format(
            s=subject,
            p=rng.choice(PEOPLE),
            c=rng.choice(CITIES),
            t=rng.choice(SUBJECTS["tool"]),
            n=rng.choice((rng.randint(2, 60), rng.randint(10, 5000))),
            d=rng.choice(WEEKDAYS),
            m=rng.choice(MONTHS),
        )

    def memory(self, topic: int) -> tuple[str, str]:
        kind, template = self.rng.choice(MEMORY_TEMPLATES[TOPICS[topic][0]])
        return kind, self._fill(template, topic)

    def query(self, topic: int) -> str:
        return self._fill(self.rng.choice(QUERY_TEMPLATES[TOPICS[topic][0]]), topic)


# -- synthetic vectors -----------------------------------------------------------------------


def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


class Space:
    """Topic centroids and noisy samples around them (SYNTHETIC embeddings)."""

    def __init__(self, dim: int, topics: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        common = _unit(rng.standard_normal(dim))
        own = _unit(rng.standard_normal((topics, dim)))
        self.dim = dim
        self.centroids = _unit(SHARED_DIRECTION * common + own)

    def sample(self, topics: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One unit vector per topic index; the noise norm varies ±25 % between samples."""
        scale = NOISE_NORM / math.sqrt(self.dim) * rng.uniform(0.8, 1.25, size=(len(topics), 1))
        noise = rng.standard_normal((len(topics), self.dim)) * scale
        return _unit(self.centroids[topics] + noise).astype(np.float32)


class BenchEmbedder:
    """The Embedder protocol over precomputed synthetic vectors: a registered text gets its
    vector back; an unknown one gets a text-seeded random vector (and is counted)."""

    name = "bench-synthetic"

    def __init__(self, space: Space, seed: int) -> None:
        self.space = space
        self.dim = space.dim
        self.rng = np.random.default_rng(seed)
        self.vectors: dict[str, list[float]] = {}
        self.unknown = 0

    def register(self, text_: str, topic: int) -> list[float]:
        """The text's vector (made on first sight, so a repeated text keeps one vector)."""
        if text_ not in self.vectors:
            vector = self.space.sample(np.array([topic]), self.rng)[0].tolist()
            self.vectors[text_] = vector
            # Procedural suggestions embed the normalised query pattern: same meaning.
            self.vectors.setdefault(normalise_pattern(text_), vector)
        return self.vectors[text_]

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        out = []
        for item in texts:
            vector = self.vectors.get(item)
            if vector is None:
                self.unknown += 1
                seed = int.from_bytes(hashlib.sha256(item.encode()).digest()[:8], "big")
                raw = np.random.default_rng(seed).standard_normal(self.dim)
                vector = _unit(raw).tolist()
            out.append(vector)
        return out


# -- data ------------------------------------------------------------------------------------


def user_name(index: int) -> str:
    return f"user-{index:04d}"


def user_sizes(total: int, users: int, skew: float) -> np.ndarray:
    """Memories per user, largest first: Zipf weights, at least 3 each (1 if too few)."""
    minimum = min(3, total // users)
    weights = 1.0 / np.arange(1, users + 1) ** skew
    sizes = np.maximum(minimum, np.floor(total * weights / weights.sum())).astype(np.int64)
    sizes[0] += total - int(sizes.sum())
    if sizes[0] < sizes[1] or sizes.min() < 1:
        raise SystemExit(f"cannot split {total} memories over {users} users with skew {skew}")
    return sizes


def user_topics(sizes: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Each user's memories' topics: mostly a few favourites (more for bigger users)."""
    out = []
    for size in sizes:
        favourites = int(min(len(TOPICS), max(3, 3 * math.sqrt(size))))
        chosen = rng.choice(len(TOPICS), size=favourites, replace=False)
        weights = 1.0 / np.arange(1, favourites + 1) ** 0.8
        out.append(rng.choice(chosen, size=int(size), p=weights / weights.sum()).astype(np.int32))
    return out
