"""The session's model work: who holds a session (``activity``), where the work runs
(``worker``) and how one model call is made (``calls``).

Every reply, compact and chunked analysis goes through these three, so "is this
session busy?", "stop that" and "what did that call cost?" each have one answer.
"""
