"""`engram tenant` and `engram key`: tenants and their API keys (the owner role's work)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from app.cli.output import console, refuse
from app.cli.supervisor import ensure_services, with_services
from app.config import get_settings

tenant_cli = typer.Typer(help="Tenants.", no_args_is_help=True)
key_cli = typer.Typer(
    help="API keys: minted per tenant, shown once, revocable.", no_args_is_help=True
)


@tenant_cli.command("create")
@with_services
def tenant_create(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    key_name: Annotated[str, typer.Option(help="Name of the first API key.")] = "default",
) -> None:
    """Register a tenant and mint its first API key (printed once)."""
    minted = _mint(tenant, key_name, "choose a tenant id of that form")
    console.print(f"tenant {tenant} ready; API key {minted.id} (shown once):")
    typer.echo(minted.key)


@key_cli.command("create")
@with_services
def key_create(
    tenant: Annotated[str, typer.Option(help="Tenant id.")],
    name: Annotated[str, typer.Option(help="What the key is for.")] = "",
) -> None:
    """Mint an API key for a tenant; the key is printed once and stored only as a hash."""
    minted = _mint(tenant, name, "choose a --tenant of that form")
    console.print(f"key {minted.id} for tenant {tenant} (shown once):")
    typer.echo(minted.key)


def _mint(tenant: str, name: str, fix: str) -> Any:
    """A new key of the tenant (registered if new); a malformed tenant id is refused."""
    from app.services.tenants import TenantError, mint_key

    ensure_services(get_settings())
    try:
        return mint_key(tenant, name)
    except TenantError as exc:
        refuse(str(exc), fix)


@key_cli.command("list")
@with_services
def key_list(tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None) -> None:
    """Keys (ids, names, prefixes, state); never the secrets."""
    from app.services.tenants import list_keys

    ensure_services(get_settings())
    table = Table("id", "tenant", "name", "prefix", "created", "revoked")
    for row in list_keys(tenant):
        table.add_row(
            str(row.id),
            row.tenant_id,
            row.name,
            row.key_prefix,
            f"{row.created_at:%Y-%m-%d %H:%M}",
            f"{row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "",
        )
    console.print(table)


@key_cli.command("revoke")
@with_services
def key_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (from key list).")],
) -> None:
    """Revoke a key; API processes stop accepting it within a few seconds."""
    import uuid

    from app.services.tenants import revoke_key

    ensure_services(get_settings())
    try:
        parsed = uuid.UUID(key_id)
    except ValueError:
        refuse(f"not a key id: {key_id!r}", "give the id `engram key list` shows")
    if not revoke_key(parsed):
        refuse(f"no live key {key_id}", "see `engram key list` for the keys not revoked", 1)
    console.print(f"key {key_id} revoked")
