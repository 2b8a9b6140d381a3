"""A tenant's share of an API door (app/services/quota.py), said as 429 with Retry-After."""

from __future__ import annotations

from fastapi import HTTPException, status

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
