"""`engram mcp`: Engram's tools for MCP clients, over stdio or streamable HTTP.

The server is an adapter over the Python SDK (`engram_memory_client`) talking to the REST API:
it needs the API's URL and a tenant API key, never database credentials, and every call still
passes the API's one door (validation, limits, tenancy).
"""
