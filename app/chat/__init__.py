"""Chat: prepare a turn (``prepare``), generate its reply in the background (``replies``), the page (``views``)."""
