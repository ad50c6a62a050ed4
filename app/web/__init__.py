"""The web layer: every blueprint, view and HTML fragment, and nothing else imports Flask.

The domain packages (``analysis``, ``chat``, ``sessions``, ``retrieval``, ``work``,
``modelserver``, ``chunking``) never import this package; it imports them.
``app.create_app`` registers the blueprints from here. Importing it does no work.

- ``context``: ``services()``, the app's ``Services`` read from Flask's ``current_app``
- ``security``: the request hooks (CSRF, encodings, the body limit's 413, headers, error pages)
- ``auth``: the login gate, the login and logout pages
- ``health``, ``files``, ``chat``, ``analysis``, ``sessions``: the blueprints
- ``fragments``: the HTML of a turn and the page context shared by the chat and analysis views
"""
