"""The HTTP/JSON listener: HTTP/1.1 and HTTP/2 connections (``listener``, ``http2``),
its configuration and TLS (``config``), and the worker sessions and long-poll claims
(``sessions``). docs/http.md."""
