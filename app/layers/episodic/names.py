"""Who a question's names are: the conversation's speakers, and for a name that is none of
theirs the turns whose own words say it, each with the speaker it was said to
(app/text/speaker_names.py reads them: "Thanks, Kate!" said to Emi makes Kate Emi)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from app.db.rows import fetch
from app.layers.episodic.message_order import arrival, owner, walk
from app.layers.episodic.search import recent_speakers
from app.text.speaker_names import Mention, Names

MENTION_SAMPLE = 50  # turns read for each unknown name, best matches first
ADDRESSEE_WALK = 5  # turns back in the session to find who a turn was said to

# Each word's turns that say it in their own words (label D of search_tsv: a neighbour's word
# is not this turn's), then the nearest earlier turn of the session by someone else.
_MENTIONS = (
    "WITH src AS ("  # noqa: S608
    f" SELECT w.word, t.id, t.session_id, t.occurred_at, {arrival('t.')} AS arrival,"
    "  t.speaker, t.content"
    " FROM unnest(CAST(:words AS text[])) AS w(word)"
    " CROSS JOIN LATERAL episodic.match_turns(:tenant, :user,"
    "  to_tsquery('english', w.word || :own), :sample, CAST(NULL AS text),"
    "  CAST(NULL AS timestamptz), CAST(NULL AS timestamptz)) AS m"
    f" JOIN episodic.turns AS t ON t.id = m.id AND {owner('t.')})"
    " SELECT src.word, src.speaker, src.content, ("
    f"  SELECT b.speaker FROM ({walk('<', columns='t.speaker')}) AS b"
    "  WHERE b.speaker IS DISTINCT FROM src.speaker ORDER BY b.n LIMIT 1) AS addressee"
    " FROM src"
)


def mentions_of(
    session: Session, tenant_id: str, user_id: str, words: Sequence[str]
) -> dict[str, list[Mention]]:
    """word → up to MENTION_SAMPLE of the user's turns that say it, with their addressee."""
    rows = fetch(
        session,
        _MENTIONS,
        {
            "tenant": tenant_id,
            "user": user_id,
            "words": list(words),
            "own": ":D",  # the weight label of a turn's own words
            "sample": MENTION_SAMPLE,
            "n": ADDRESSEE_WALK,
        },
    )
    found: dict[str, list[Mention]] = {}
    for row in rows:
        found.setdefault(row.word, []).append(Mention(row.speaker, row.addressee, row.content))
    return found


def names_in(session: Session, tenant_id: str, user_id: str, query: str) -> Names:
    """The user's recent speakers and what the query's other names stand for; one more
    statement only when the query holds a capitalised word that is no speaker's name."""
    return Names.resolve(
        query,
        recent_speakers(session, tenant_id, user_id),
        lambda words: mentions_of(session, tenant_id, user_id, words),
    )
