"""Sessions: each conversation is one Fountain screenplay (``.spmd``) on disk.

``fountain`` is the lossless codec, ``notes`` builds and reads every ``[[note]]``
the app writes, ``store`` owns the files (one writer per session), ``index``
summarises them for the list. The session pages are ``app.web.sessions``.
"""
