"""An egress gateway for AI agents.

`policy` decides, purely. `fetch` is the only way out, and asks `policy` at every hop and
about every address. `extract` and `search` turn bytes into results. `provenance` and `audit`
record what happened under which policy. `tools` are the use cases. `server` (HTTP API, MCP,
forward proxy) and `cli` are adapters that only translate.
"""

__version__ = "0.1.0"
