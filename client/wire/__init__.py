"""HTTP to one server: the streaming transport, the SSE parser, the endpoint (chat streams, control-plane GETs) and
the load-document parsers.
"""
