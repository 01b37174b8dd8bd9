"""The use cases: WebFetch, WebSearch, XSearch, Research (`webfetch.py`, `websearch.py`,
`xsearch.py`, `research.py`), forward traffic for the proxy port (`forward.py`,
`forward_traffic.py`) and `gateway policy explain` (`explain.py`).

Each asks `policy` for every decision, reaches the network only through `fetch` (and
search providers through `search`), and writes the audit record of each call, built in
one place (`records.py`). Transport-agnostic: the registry (`registry.py`) hands the same
calls and schemas to the HTTP API, MCP and `/openapi.json`. Tools never import `server`,
`runtime` or the gateway configuration: the composition root passes each what it needs.
"""
