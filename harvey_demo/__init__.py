"""The bundled demo model: SmolLM2-135M behind Ollama's HTTP API (``harvey_demo.server``).

It lives outside the ``app`` package: the app only talks HTTP to whatever
Ollama-API server it is pointed at; this one exists for the demo and the tests.
"""
