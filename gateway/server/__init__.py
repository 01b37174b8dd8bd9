"""The adapters that face agents and operators: the HTTP API (`api.py`), MCP (`mcp.py`),
`/openapi.json`, `/metrics`, `/v1/keys`, the review page (`review/`) and the forward proxy
(`proxy/`), assembled by `app.py` and run by `serve.py` (one process, or `workers.py`'s).

They only translate: bytes and HTTP in, a tool call or a use case of `gateway.tools` (or a
service of `gateway.runtime`) out, its answer or `GatewayError` back into HTTP. They never
import `policy` or `fetch` (tests/test_layers.py holds them to it), decide nothing and
write no audit record of their own making.
"""
