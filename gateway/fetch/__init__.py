"""The only way out: every outbound connection and every response the gateway reads.

`dial.py` opens every socket, after classifying the exact address about to be dialled;
`resolver.py` and `lookups.py` answer names and check every address of an answer;
`tunnel.py` dials only checked addresses (CONNECT tunnels, and every upstream connection);
`upstream.py` is the one upstream client, for the `Fetcher` and the forward proxy alike:
keep-alive connections, TLS verified against the name asked for, each response read once
by `gateway.wire.http1`; `client.py` is the `Fetcher` (WebFetch, Research's pages), with
manual redirects, each hop decided by the policy; `provider.py` sends search and model
providers' calls through it; `decode.py` undoes content codings under the size cap.
Nothing here decides policy (it asks `policy`) or knows a tool or an adapter.
"""
