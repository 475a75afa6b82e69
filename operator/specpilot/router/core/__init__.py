"""The router's functional core: which arm and endpoint a request goes to, the table it routes by,
and how each request is measured. Pure: the router's shell does the HTTP and the watching."""
