"""Shared state through Redis (`state.redis`): rate limits, the search cache, provider health
and search result ids, counted and remembered across workers and replicas.

`connection.SharedState` owns the client and knows whether Redis answers; each store falls
back (fail closed or open for limits, skip or local for the rest) while it does not. Nothing
here decides policy, and nothing here ever holds an agent's request or response body.
"""
