"""The ranking knobs of hybrid search, a part of Engram's Settings (app/config.py).

Where a comment gives a default's reason, it was measured with bench/conversations.py (tuned
on conversations 1-7, confirmed on 8-10) and bench/quality.py (MADial) beside it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SearchSettings(BaseSettings):
    """`ENGRAM_SEARCH_*`: what a search ranks, its legs' weights, boosts, pools and priors."""

    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore")

    # The unit of evidence is the source turn: turns are ranked by their own words and vector
    # and by the memories extracted from them (bench/conversations.py measures it on long real
    # conversations); `memories` ranks memories instead, turns folding into them.
    search_unit: Literal["turns", "memories"] = Field(
        default="turns", description="what a search ranks: source turns, or memories"
    )
    # Rank fusion: scores of the four legs live on different scales (BM25 over a ceiling sat
    # near 0.2 where cosine sat near 0.6), so a strong single-leg match was swamped by
    # weighted scores; ranks cannot be. Weighted stays selectable for the memories unit.
    search_fusion: Literal["rrf", "weighted"] = Field(
        default="rrf", description="how the rankings are fused"
    )
    search_rrf_k: int = Field(default=60, ge=1, le=1000)
    search_rrf_score_power: float = Field(
        default=1.0, ge=0, le=4, description="turns unit: votes scaled by (score / leg best)^p"
    )
    search_weight_dense: float = Field(default=1.0, ge=0, le=4, description="memory vectors")
    search_weight_lexical: float = Field(default=1.0, ge=0, le=4, description="memory words")
    # The memory vectors again, for the question with the speakers' names it gives (the other
    # legs embed it without them): memories name who did what. Turns unit only.
    search_weight_dense_named: float = Field(
        default=1.0, ge=0, le=4, description="memory vectors, for the question with its names"
    )
    search_weight_turn_dense: float = Field(default=1.0, ge=0, le=4, description="turn vectors")
    search_weight_turn_lexical: float = Field(default=1.5, ge=0, le=4, description="turn words")
    search_weight_time: float = Field(
        default=1.0, ge=0, le=4, description="turns inside a time the query names"
    )
    # Multi-hop: memories sharing an entity (not a hub) with the question or the best memories.
    search_weight_entity: float = Field(
        default=0.3, ge=0, le=4, description="memories reached through L4 entities"
    )
    search_entity_seeds: int = Field(
        default=5, ge=0, le=50, description="best first-hop memories whose entities seed L4"
    )
    search_entity_hub_share: float = Field(
        default=0.05, gt=0, le=1, description="entities in more of the memories seed nothing"
    )
    # Which speaker a question is about is left to this boost: the query is embedded without
    # the speakers' names (app/text/speaker_names.py). 1.0 on conversations 1-7 of
    # bench/conversations.py (0.5 and 0.75 ranked them less well, 1.5 and 2 no better).
    search_speaker_boost: float = Field(
        default=1.0, ge=0, le=4, description="turns of the one speaker a question names: x(1+b)"
    )
    # Turns in which the speaker speaks of themselves (app/services/search_turns.py).
    search_first_person_boost: float = Field(
        default=0.2, ge=0, le=4, description="turns with I / me / my / mine / myself: x(1+b)"
    )
    # Evidence clusters: a turn found near one of the best turns in its session ranks higher
    # (app/scoring/proximity.py).
    search_neighbour_boost: float = Field(
        default=0.5, ge=0, le=4, description="x(1 + b * nearness) for a best turn's neighbours"
    )
    search_neighbour_decay: float = Field(
        default=4.0, gt=0, le=100, description="messages over which the boost falls by a factor e"
    )
    search_neighbour_window: int = Field(
        default=8, ge=0, le=50, description="messages either side of a best turn the boost reaches"
    )
    search_turns_per_memory: int = Field(
        default=3, ge=1, le=50, description="source turns a memory hit lends its rank to"
    )
    search_candidates: int = Field(
        default=100, ge=10, le=2000, description="candidates per ranking before fusion"
    )
    search_turns: Literal["uncovered", "always", "never"] = Field(
        default="uncovered",
        description="memories unit: raw L2 turns in results only where no gem covers them",
    )
    search_prior_importance: float = Field(default=0.2, ge=0, le=2)
    search_prior_recency: float = Field(default=0.1, ge=0, le=2)
    search_prior_consolidation: float = Field(default=0.1, ge=0, le=2)
    search_recency_half_life_days: float = Field(default=30.0, gt=0)
    search_ef_search: int = Field(default=100, ge=10, le=1000, description="hnsw.ef_search")
