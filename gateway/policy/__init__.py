"""The policy core: load a YAML policy, normalise hosts and URLs, classify addresses, decide.

Pure: stdlib, pyyaml, idna and tldextract (its bundled suffix list, offline); never asyncio,
aiohttp or the network.
"""
