"""Strict YAML for files people write: the plumbing that policies and the gateway configuration
both read with.

`source` turns bytes into one composed document with positions (refusing duplicate keys, YAML
1.1 booleans, tags, alias bombs, deep nesting, huge or binary files), `walk` checks its nodes
against a schema (did-you-mean for unknown keys, defaults, required keys), and `issues` is the
one problem shape both report. Pure: no I/O beyond reading the named file, no asyncio, no
aiohttp, no knowledge of policies or configuration.
"""
