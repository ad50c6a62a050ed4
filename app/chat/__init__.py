"""Chat: the use cases (``turns``: send, re-send, regenerate, compact, stop), a turn's budget and
request (``prepare``), the reply read in the background (``replies``), what the status line says
(``status``). The HTML of turns and the chat page are in ``app.web`` (``fragments``, ``chat``)."""
