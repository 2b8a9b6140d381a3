"""A tenant's share of an API door (app/services/quota.py), said as 429 with Retry-After.

Events, searches and context blocks charge their own doors in their routes (a batch costs
its events); every other tenant route takes `MeteredTenant`, which charges one call, and a
batch of memories to embed one more per memory (`charge_items`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request, status

from app.api.auth import Tenant
from app.services.quota import TenantQuota


def within_share(quota: TenantQuota, tenant: str, cost: int = 1) -> None:
    """429 with Retry-After when the tenant is over its share of this door."""
    refused = quota.take(tenant, cost)
    if refused is not None:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            {"message": refused.message(), "retry_after_s": refused.retry_after_s},
            headers={"Retry-After": str(refused.retry_after_s)},
        )


def metered_tenant(request: Request, tenant: Tenant) -> str:
    """The caller's tenant, once it has taken a call from its share."""
    within_share(request.app.state.engram.calls_quota, tenant)
    return tenant


MeteredTenant = Annotated[str, Depends(metered_tenant)]


def charge_items(request: Request, tenant: str, items: int) -> None:
    """A request that does the work of `items` calls (memories to embed) takes the ones
    beyond the call `MeteredTenant` charged; refused, it gives that call back (nothing
    was done)."""
    quota = request.app.state.engram.calls_quota
    try:
        within_share(quota, tenant, items - 1)
    except HTTPException:
        quota.give_back(tenant, 1)
        raise
