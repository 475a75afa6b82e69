"""The scope router: an OpenAI-compatible streaming proxy per pilot.

It classifies each request into a scope, splits scopes between arms by the operator's routing
table, measures every request per scope and arm, and falls back to ordinary decoding (the
baseline arm) whenever the table or the speculative arm cannot be trusted.
"""
