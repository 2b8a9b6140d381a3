"""Engram's one Settings object: typed, environment-driven, no I/O at import."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from app.search_settings import SearchSettings

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FLOWER_PASSWORD = "engram-dev"  # noqa: S105 - refused by `check_production`
METRICS_TOKEN_MIN_CHARS = 16
# A memory keeps its vector in its row, and a row must fit one 8 KB page: 4 bytes a dimension
# beside up to ~480 bytes of the row's other inline values, so past ~1,900 dimensions a memory
# with long ids is refused ("row is too big") and the worker storing it fails (pgvector's HNSW
# index stops at 2,000). 1,536, OpenAI's text-embedding-3-small, leaves room for new columns.
MAX_EMBEDDING_DIM = 1536
REDIS_BROKER_SCHEMES = ("redis", "rediss", "redis+socket", "sentinel")
AMQP_BROKER_SCHEMES = ("amqp", "amqps", "pyamqp")
BROKER_SCHEMES = REDIS_BROKER_SCHEMES + AMQP_BROKER_SCHEMES


class Settings(SearchSettings):
    """Every knob Engram reads; names map to `ENGRAM_*` env vars unless aliased."""

    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore", populate_by_name=True)

    environment: str = Field(default="development", description="`production` enables checks")

    # Connections. With no DATABASE_URL an embedded Postgres is started under data_dir.
    database_url: str | None = Field(default=None, alias="DATABASE_URL")
    app_database_url: str | None = Field(
        default=None,
        alias="APP_DATABASE_URL",
        description="login role the application uses; must not own tables nor bypass RLS",
    )
    app_role: str = Field(default="engram_app", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    app_role_password: SecretStr = SecretStr("engram-app")
    database_name: str = "engram"
    # `redis://host:port/0` for one server; `redis+cluster://host:port` names a Redis Cluster
    # by any of its nodes (streams, working memory and caches then live on the cluster; the
    # Celery broker cannot, so CELERY_BROKER_URL must name a plain Redis or AMQP broker).
    redis_url: str | None = Field(default=None, alias="REDIS_URL")
    # Celery's broker: unset, the data Redis above (queues under `<prefix>:celery:`); else a
    # Redis or RabbitMQ of its own (workers/broker.py). Streams and L1 never move with it.
    celery_broker_url: str | None = Field(
        default=None,
        alias="CELERY_BROKER_URL",
        description="redis://, rediss://, sentinel:// or amqp(s):// URL of Celery's broker",
    )
    data_dir: Path = PROJECT_ROOT / ".engram"

    # Redis key namespace: everything Engram writes to Redis starts with this, then with the
    # deployment's id (app/deployment.py), so installs sharing one Redis never share a key.
    redis_prefix: str = "engram"
    deployment_id: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{16}$",
        description="for a producer with only REDIS_URL; with a database it must match its id",
    )

    # L0 streams.
    stream_partitions: int = Field(default=8, ge=1, le=1024)
    stream_max_len: int = Field(default=1_000_000, ge=1000, description="hard cap per partition")
    # Each tenant's share of POST /v1/events (app/services/quota.py): a bucket of `burst`
    # events refilled at `per_s` (0: no limit). The burst takes a large import at once; the
    # rate is what one tenant may keep up beside the others. The defaults bind no tenant of
    # one small node (its workers ingest less than that); a fleet shared by many tenants
    # sets them to each one's share of its capacity.
    tenant_events_per_s: float = Field(default=5000.0, ge=0, allow_inf_nan=False)
    tenant_events_burst: int = Field(
        default=100_000, ge=1000, description="at least one batch of the API's 1,000 events"
    )
    # The same for searches and context blocks, one token each.
    tenant_reads_per_s: float = Field(default=500.0, ge=0, allow_inf_nan=False)
    tenant_reads_burst: int = Field(default=5_000, ge=1)
    # Every other tenant route (memories, edits, knowledge, procedures, users, jobs, stats),
    # one token a request: listings and remembering (embedded in the API process) are work too.
    tenant_calls_per_s: float = Field(default=200.0, ge=0, allow_inf_nan=False)
    tenant_calls_burst: int = Field(default=2_000, ge=1)
    consumer_group: str = "ingest"
    consumer_batch_size: int = Field(default=500, ge=1, le=10_000)
    consumer_block_ms: int = Field(default=1000, ge=1)
    consumer_threads: int = Field(default=2, ge=0, le=32)
    # How long a pending entry sits idle before another consumer takes it over, so how soon a
    # killed worker's entries are redone (~1.25x this: reclaims run every quarter of it). A
    # live consumer re-touches what it holds (XCLAIM JUSTID) every quarter of it, while its
    # handler works and while it backs off, for up to ENGRAM_TASK_TIME_LIMIT_S: the bound is
    # the gap between touches, not the longest batch. See README, "Running it for real".
    claim_min_idle_ms: int = Field(
        default=15_000,
        ge=10,
        description="idle time before another consumer reclaims a pending entry",
    )
    max_deliveries: int = Field(default=5, ge=1)
    trim_interval_s: float = Field(default=30.0, gt=0)
    # Safe mode for failover (app/streams/durable.py): with N > 0 an event is reported accepted
    # only once N replicas of the master holding its partition acknowledged it (Redis WAIT),
    # so a replica promoted after the master dies has it; fewer in time → a retryable refusal.
    stream_wait_replicas: int = Field(
        default=0, ge=0, le=16, description="replicas that must acknowledge an event's XADD"
    )
    stream_wait_timeout_ms: int = Field(
        default=1000, ge=1, le=60_000, description="how long a producer waits for them"
    )

    # Token budgets are counted by this tokenizer: "wordpiece" (shipped) or the path of a
    # model family's tokenizer.json (app/text/tokens.py).
    tokenizer: str = Field(default="wordpiece", min_length=1)

    # Event limits (bytes of UTF-8).
    max_content_bytes: int = Field(default=64_000, ge=1)
    max_metadata_bytes: int = Field(default=16_000, ge=2)
    max_event_bytes: int = Field(
        default=1_048_576, ge=1024, description="a whole serialized event, fields included"
    )

    # L1 working memory.
    working_turns: int = Field(default=20, ge=1)
    working_idle_ttl_s: int = Field(default=3600, ge=10)
    working_flush_margin_s: int = Field(default=600, ge=1)
    working_summary_tokens: int = Field(default=400, ge=16)
    working_replay_horizon_s: int = Field(default=86_400, ge=0)

    # L2 episodic.
    session_idle_timeout_s: int = Field(default=1800, ge=1)

    # Attention (app/scoring): composite salience = weighted mean of the three parts (weights
    # are normalised, so only their ratios matter), then one competition per intervention window.
    salience_weight_emotional: float = Field(default=0.4, ge=0, le=100)
    salience_weight_connection: float = Field(default=0.35, ge=0, le=100)
    salience_weight_novelty: float = Field(default=0.25, ge=0, le=100)
    attention_window_s: float = Field(
        default=5.0, gt=0, le=86_400, description="intervention window, anchored at its first turn"
    )
    attention_winners_per_window: int = Field(default=1, ge=1, le=1000)
    attention_consolidate_threshold: float = Field(
        default=0.55, ge=0, le=1, description="a winner at or above it is tagged for consolidation"
    )
    attention_forget_threshold: float = Field(
        default=0.2, ge=0, le=1, description="a loser below it leaves the awake stream"
    )

    # Extraction triggers and gem storage.
    extract_after_turns: int = Field(default=5, ge=1, description="N new turns trigger")
    extract_idle_s: int = Field(default=900, ge=1, description="idle-timeout trigger")
    context_window_tokens: int = Field(default=8000, ge=100)
    extract_context_usage: float = Field(default=0.5, gt=0, le=1, description="L1 usage trigger")
    extract_max_batch_turns: int = Field(default=200, ge=1)
    extract_max_attempts: int = Field(default=5, ge=1)
    extract_retry_after_s: int = Field(default=600, ge=1)
    dedup_cosine: float = Field(default=0.92, gt=0, le=1)
    dedup_trigram: float = Field(default=0.3, ge=0, le=1)

    # Extractors (app/extraction): rules offline by default, or an OpenAI-compatible chat model.
    extractor_backend: Literal["offline", "llm"] = "offline"
    extract_max_chars: int = Field(
        default=8000, ge=100, description="longer turns are cut (gems note `truncated`)"
    )
    extract_context_tokens: int = Field(
        default=2000, ge=0, description="earlier turns shown to the extractor, newest kept"
    )
    llm_base_url: str = Field(
        default="https://api.openai.com/v1", description="OpenAI-compatible API, sans /chat"
    )
    llm_model: str = Field(default="gpt-4o-mini", description="chat model for the llm backend")
    llm_api_key: SecretStr | None = None
    llm_timeout_s: float = Field(default=60.0, gt=0)
    llm_max_retries: int = Field(default=3, ge=0, le=10)

    # L3 semantic.
    # A bigger model is asked for fewer dimensions (embedding_request_dim): see
    # MAX_EMBEDDING_DIM.
    embedding_dim: int = Field(
        default=384, ge=1, description="vector dimension of the schema (at most 1,536)"
    )
    embedding_backend: Literal["local", "openai"] = "local"
    embedding_base_url: str = Field(
        default="https://api.openai.com/v1", description="OpenAI-compatible API, sans /embeddings"
    )
    embedding_model: str = Field(
        default="text-embedding-3-small", description="model name sent to the openai backend"
    )
    embedding_api_key: SecretStr | None = None
    embedding_request_dim: bool = Field(
        default=False,
        description="send `dimensions` = ENGRAM_EMBEDDING_DIM to the openai backend (OpenAI's"
        " text-embedding-3 models shorten their vectors to it; most other servers refuse it)",
    )
    embedding_timeout_s: float = Field(default=30.0, gt=0)
    # Long enough for what re-embeds a text (a gem after its turn's passages, retries, a
    # search repeated within the day); every cached vector costs ~2 KB of Redis per text.
    embedding_cache_ttl_s: int = Field(default=86_400, ge=1)
    embedding_threads: int = Field(
        default=1, ge=1, le=64, description="onnxruntime intra-op threads of the local model"
    )
    embedding_local_model: Literal["all-MiniLM-L6-v2-q8", "all-MiniLM-L6-v2-int8"] = Field(
        default="all-MiniLM-L6-v2-q8",
        description="file of the local model: q8 runs int8 arithmetic; int8 is the slower file"
        " whose vectors databases made before q8 hold (app/embedding/local.py)",
    )

    # Recall (hybrid search, context assembly, prefetch, API).
    # How a search ranks is SearchSettings' (app/search_settings.py).
    context_token_budget: int = Field(default=2000, ge=50, le=200_000)
    prefetch_ttl_s: int = Field(default=30, ge=1, le=3600)
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=1, le=65535)
    api_max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    api_key_stale_s: float = Field(
        default=900,
        ge=0,
        le=86_400,
        description="while Postgres is down, a key confirmed this recently still sends events",
    )
    # GET /metrics answers `Authorization: Bearer <this>` only: its numbers are deployment-wide,
    # so no tenant's API key opens it. Unset, the API does not serve metrics (404).
    metrics_token: SecretStr | None = Field(
        default=None, description="operator token for GET /metrics (at least 16 characters)"
    )
    # `json`: one JSON object per log line, with the ids of the request, batch or task it
    # belongs to (app/logs.py), in the API, the workers and the CLI.
    log_format: Literal["text", "json"] = "text"
    procedure_min_confidence: float = Field(default=0.7, ge=0, le=1)
    procedure_min_similarity: float = Field(default=0.75, ge=-1, le=1)

    # Background cognition (decay, Hebbian learning, dream cycles, meta refresh, retention).
    decay_interval_s: float = Field(default=3600, gt=0)
    decay_half_life_days: float = Field(
        default=30.0, gt=0, description="half-life of an unused, plain memory's importance"
    )
    decay_floor: float = Field(default=0.03, ge=0, lt=1, description="archive below this")
    decay_batch: int = Field(default=50_000, ge=100, le=1_000_000)
    restore_importance: float = Field(default=0.2, gt=0, le=1)
    hebbian_interval_s: float = Field(default=60, gt=0)
    hebbian_rate: float = Field(
        default=0.1, gt=0, le=1, description="eta in w <- w + eta * (1 - w)"
    )
    hebbian_weaken: float = Field(
        default=0.01, ge=0, lt=1, description="share of weight lost per pass without co-firing"
    )
    hebbian_floor: float = Field(default=0.02, ge=0, lt=1, description="prune edges below this")
    hebbian_batch: int = Field(default=100_000, ge=100, le=10_000_000)
    hebbian_max_pairs: int = Field(
        default=45, ge=1, le=1000, description="pairs one search may co-activate (top hits)"
    )
    dream_interval_s: float = Field(default=1800, gt=0)
    dream_batch: int = Field(default=200, ge=1, le=10_000, description="replays per user per cycle")
    dream_users_per_run: int = Field(default=100, ge=1, le=100_000)
    dream_link_cosine: float = Field(default=0.8, gt=0, le=1)
    dream_cluster_cosine: float = Field(default=0.9, gt=0, le=1)
    dream_cluster_min: int = Field(default=3, ge=2, le=100)
    dream_graph_max_nodes: int = Field(default=5000, ge=10, le=1_000_000)
    meta_refresh_interval_s: float = Field(default=6 * 3600, gt=0)
    meta_refresh_after_memories: int = Field(
        default=10_000, ge=1, description="new memories since the last refresh that trigger one"
    )
    access_retention_days: float = Field(default=7, gt=0)
    job_runs_retention_days: float = Field(default=30, gt=0)
    hebbian_weaken_period_s: float = Field(
        default=86_400, gt=0, description="how long an edge may go unfired before it weakens"
    )
    event_retention_days: float = Field(
        default=30, gt=0, description="L2 events that are not turns are kept this long"
    )

    # Celery.
    task_time_limit_s: int = Field(default=600, ge=1)
    task_max_deliveries: int = Field(default=3, ge=1)
    flower_address: str = "127.0.0.1"
    flower_port: int = 5555
    flower_user: str = "engram"
    flower_password: SecretStr = SecretStr(DEFAULT_FLOWER_PASSWORD)
    flower_password_file: Path | None = Field(
        default=None, description="file holding Flower's password (wins over the variable)"
    )

    @model_validator(mode="after")
    def check_production(self) -> Settings:
        """Refuse development defaults where they would be a hole in production."""
        if self.environment == "production":
            if (
                self.flower_password_file is None
                and self.flower_password.get_secret_value() == DEFAULT_FLOWER_PASSWORD
            ):
                raise ValueError(
                    "ENGRAM_FLOWER_PASSWORD (or ENGRAM_FLOWER_PASSWORD_FILE) must be set "
                    "in production"
                )
            if not self.database_url or not self.app_database_url or not self.redis_url:
                raise ValueError(
                    "production needs DATABASE_URL, APP_DATABASE_URL and REDIS_URL explicitly"
                )
        cluster = (self.redis_url or "").startswith(("redis+cluster://", "rediss+cluster://"))
        if cluster and not self.celery_broker_url:
            raise ValueError(
                "REDIS_URL names a Redis Cluster, which cannot carry the Celery broker: "
                "set CELERY_BROKER_URL to a plain Redis or AMQP URL"
            )
        if self.working_flush_margin_s >= self.working_idle_ttl_s:
            raise ValueError(
                "ENGRAM_WORKING_FLUSH_MARGIN_S must be below ENGRAM_WORKING_IDLE_TTL_S"
            )
        if (
            self.salience_weight_emotional
            + self.salience_weight_connection
            + self.salience_weight_novelty
            <= 0
        ):
            raise ValueError("ENGRAM_SALIENCE_WEIGHT_* must not all be zero")
        return self

    @field_validator("embedding_dim")
    @classmethod
    def dimension_a_memory_row_holds(cls, dim: int) -> int:
        if dim > MAX_EMBEDDING_DIM:
            raise ValueError(
                f"ENGRAM_EMBEDDING_DIM={dim} is more than a memory row holds"
                f" ({MAX_EMBEDDING_DIM}): ask the model for fewer dimensions"
                f" (ENGRAM_EMBEDDING_REQUEST_DIM=true with OpenAI's text-embedding-3 models)"
                " or choose a smaller model"
            )
        return dim

    @field_validator("celery_broker_url")
    @classmethod
    def broker_is_redis_or_rabbitmq(cls, url: str | None) -> str | None:
        """Empty means unset (the data Redis); only the transports Engram is tested on."""
        if not url:
            return None
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if scheme not in BROKER_SCHEMES:
            given = f"{scheme}://…" if scheme else "a URL without a scheme"
            raise ValueError(
                "CELERY_BROKER_URL must be a Redis or RabbitMQ URL "
                f"({', '.join(s + '://' for s in BROKER_SCHEMES)}), not {given}"
            )
        return url

    @field_validator("metrics_token")
    @classmethod
    def metrics_token_long_enough(cls, token: SecretStr | None) -> SecretStr | None:
        """Empty means unset (metrics off, as `ENGRAM_METRICS_TOKEN=` in an env file reads);
        a short token is guessable."""
        if token is not None and not token.get_secret_value():
            return None
        if token is not None and len(token.get_secret_value()) < METRICS_TOKEN_MIN_CHARS:
            raise ValueError(
                f"ENGRAM_METRICS_TOKEN must be at least {METRICS_TOKEN_MIN_CHARS} characters"
                " (for instance `openssl rand -hex 32`)"
            )
        return token

    @property
    def visibility_timeout_s(self) -> int:
        """Broker redelivery delay: longer than the longest task and any countdown we use."""
        return self.task_time_limit_s * 2 + 3600


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
