"""The only way out: every outbound connection and every response the gateway reads.

`dial.py` opens every socket, after classifying the exact address about to be dialled;
`resolver.py` and `lookups.py` answer names and check every address of an answer;
`client.py` is the `Fetcher` (WebFetch, Research's pages), with manual redirects, each hop
decided by the policy; `provider.py` sends search and model providers' calls through it;
`upstream.py` holds keep-alive upstream connections whose responses `gateway.wire.http1`
reads; `tunnel.py` opens CONNECT tunnels; `decode.py` undoes content codings under the size
cap. Nothing here decides policy (it asks `policy`) or knows a tool or an adapter.
"""
