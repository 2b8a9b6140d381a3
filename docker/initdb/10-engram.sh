#!/usr/bin/env bash
# Engram database bootstrap for the official postgres image.
#
# The image's entrypoint runs this once, as the superuser, and only when the data directory
# is empty. Later password changes in docker/.env are NOT applied to existing roles; use
# ALTER ROLE ... PASSWORD for that.
#
#   engram_owner  owns the database and every table, runs migrations, refreshes the
#                 cross-tenant materialized view: needs BYPASSRLS (tables FORCE RLS).
#   engram_app    what the application logs in as: no superuser, no BYPASSRLS, owns nothing,
#                 so row-level security always applies. Migrations GRANT to it, so it has to
#                 exist before `engram migrate` runs.
#
# Both extensions are created here, by the superuser, because creating `vector` may need it.
set -Eeo pipefail

: "${ENGRAM_OWNER_PASSWORD:?ENGRAM_OWNER_PASSWORD is not set}"
: "${ENGRAM_APP_PASSWORD:?ENGRAM_APP_PASSWORD is not set}"

# Passwords travel as psql variables and are quoted by psql (:'name'), never pasted into SQL.
psql --no-psqlrc -v ON_ERROR_STOP=1 \
    --username "$POSTGRES_USER" --dbname "${POSTGRES_DB:-$POSTGRES_USER}" \
    --set owner_password="$ENGRAM_OWNER_PASSWORD" \
    --set app_password="$ENGRAM_APP_PASSWORD" <<'SQL'
CREATE ROLE engram_owner WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE BYPASSRLS
    PASSWORD :'owner_password';
CREATE ROLE engram_app WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS
    PASSWORD :'app_password';

CREATE DATABASE engram OWNER engram_owner;

\connect engram
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;
SQL
