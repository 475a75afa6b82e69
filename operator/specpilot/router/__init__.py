"""The scope router: an OpenAI-compatible streaming proxy per pilot.

It classifies each request into a scope, splits scopes between arms by the operator's routing
table, measures every request per scope and arm, and falls back to ordinary decoding (the
baseline arm) whenever the table or the speculative arm cannot be trusted.

It is a program of its own: among specpilot's packages it imports only `specpilot.wire`, where
its contracts with the operator live (the routing table in `wire.routes`, the per-request samples
and the ``/samples`` page in `wire.samples`, its flags in `wire.routerconfig`, object names and
labels in `wire.names`). What stays here is the router's own: pure routing choices (`core.choice`), the
EndpointSlice reading (`slices`), stream measurement (`stream_meter`), the sample ring (`sample_log`) and
state (`state`), how a request ended (`outcome`), and the I/O around them: the traffic port's
HTTP/1.1 server (`server`, reading requests in `reader`, framing responses in `framing`) and
upstream connection pool (`upstream`) on asyncio Protocols parsed by httptools, the proxy between
them (`proxy`, sending through `relay`, relaying each `exchange`, changing headers by `rewrite`),
`kube`, `static`, `admin` (aiohttp) and `app`.
"""
