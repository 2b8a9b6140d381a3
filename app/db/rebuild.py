"""What a table carries besides its rows and its keys, read from the catalog as DDL to run on
a replacement: the migrations that rebuild a table (partitioning it, or undoing that) restore
whatever the previous revision left, not a list kept by hand."""

from __future__ import annotations

from sqlalchemy import Connection, text

_CMD = {"*": "ALL", "r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE"}


def carried(conn: Connection, table: str) -> list[str]:
    """What a table carries besides its rows and keys, as DDL to run on its replacement:
    indexes (other than the keys'), triggers, row-level security, policies and grants."""
    oid = {"t": table}
    statements = [
        # A partitioned table's index reads `ON ONLY`; on its replacement it covers every part.
        row[0].replace(" ON ONLY ", " ON ")
        for row in conn.execute(
            text(
                "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index AS i"
                " WHERE i.indrelid = CAST(:t AS regclass) AND NOT EXISTS"
                " (SELECT 1 FROM pg_constraint AS c WHERE c.conindid = i.indexrelid)"
                " ORDER BY i.indexrelid"
            ),
            oid,
        )
    ]
    statements += [
        row[0]
        for row in conn.execute(
            text(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
                " WHERE tgrelid = CAST(:t AS regclass) AND NOT tgisinternal ORDER BY tgname"
            ),
            oid,
        )
    ]
    enabled, forced = conn.execute(
        text(
            "SELECT relrowsecurity, relforcerowsecurity FROM pg_class"
            " WHERE oid = CAST(:t AS regclass)"
        ),
        oid,
    ).one()
    if enabled:
        statements.append(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    if forced:
        statements.append(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    for name, permissive, cmd, roles, using, check in conn.execute(
        text(
            "SELECT quote_ident(polname), polpermissive, polcmd,"
            " ARRAY(SELECT CASE WHEN r = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r))"
            "  END FROM unnest(polroles) AS r),"
            " pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid)"
            " FROM pg_policy WHERE polrelid = CAST(:t AS regclass) ORDER BY polname"
        ),
        oid,
    ):
        statements.append(
            f"CREATE POLICY {name} ON {table} AS {'PERMISSIVE' if permissive else 'RESTRICTIVE'}"
            f" FOR {_CMD[cmd]} TO {', '.join(roles)}"
            + (f" USING ({using})" if using else "")
            + (f" WITH CHECK ({check})" if check else "")
        )
    return statements + grants(conn, table)


def grants(conn: Connection, relation: str) -> list[str]:
    rows = conn.execute(
        text(
            "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid("
            "a.grantee)) END, string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type)"
            " FROM pg_class AS c, aclexplode(c.relacl) AS a"
            " WHERE c.oid = CAST(:t AS regclass) AND a.grantee <> c.relowner GROUP BY 1"
        ),
        {"t": relation},
    )
    return [f"GRANT {privileges} ON {relation} TO {grantee}" for grantee, privileges in rows]


def views_over(conn: Connection, view: str, matview: str) -> list[str]:
    """DDL that recreates a materialized view and a view over it as they are now (data,
    indexes, grants, options): a migration drops them, rebuilds the table they read, and
    runs this."""
    view_sql, view_options, _ = _view(conn, view)
    matview_sql, _, populated = _view(conn, matview)
    data = "" if populated else " WITH NO DATA"
    options = f" WITH ({view_options})" if view_options else ""
    return [
        f"CREATE MATERIALIZED VIEW {matview} AS {matview_sql.rstrip().rstrip(';')}{data}",
        *carried(conn, matview),
        f"CREATE VIEW {view}{options} AS {view_sql.rstrip().rstrip(';')}",
        *grants(conn, view),
    ]


def _view(conn: Connection, name: str) -> tuple[str, str, bool]:
    """(definition, options, populated) of a view or materialized view."""
    row = conn.execute(
        text(
            "SELECT pg_get_viewdef(oid), coalesce(array_to_string(reloptions, ', '), ''),"
            " relispopulated FROM pg_class WHERE oid = CAST(:v AS regclass)"
        ),
        {"v": name},
    ).one()
    return str(row[0]), str(row[1]), bool(row[2])
