"""The error card's words: what happened and what to do, for every kind of error a turn can record.

View text, so it lives in the web layer; the domain records only the error's kind and detail in the
session file (``notes.error``), and the card is drawn from them whenever the turn is shown.
"""

from __future__ import annotations

ERROR_TEXTS = {
    "unreachable": ("{Server} is not running", "{start} or check model_server.url in harvey.yaml."),
    "model_not_found": ("Model not installed", "{install_above}"),
    "timeout": ("The model timed out",
                "The Pi may be busy or the model too large; try again or pick a smaller model."),
    "stream_error": ("The model failed mid-reply", "Try again; if it keeps failing, check {log}."),
    "model_failed": ("The model failed mid-reply", "{Server} answered with an error while writing; try again, "
                                                   "and if it keeps failing, check {log}."),
    "context_exceeded": ("Too long for the model", "Shorten the message or start a new session."),
    "unknown_model": ("Unknown model", "Use an installed model's name after @, or {install}."),
    "too_long": ("Message too long", "Shorten it, or name a file instead of pasting it."),
    "missing_file": ("No such file", "Send it with the file suggested, or without it (the model is told the file "
                                     "could not be read). Attach adds a file to the workspace."),
    "outside_file": ("Outside the workspace", "Harvey reads only the files in its workspace: attach the file, or "
                                              "send the message without it (the model is told it could not be read)."),
    "unreadable_file": ("The file is not text", "Name a text, Markdown, HTML, source, PDF or Word file."),
    "no_text_layer": ("The PDF has no text", "It is a scan: run OCR on it (for example ocrmypdf) and name the result."),
    "encrypted": ("The PDF is encrypted", "Save a copy without the password and name that."),
    "damaged": ("The file is damaged", "Open it in its program and save it again, then name the new copy."),
    "unsaved": ("Not saved", "Make room on the disk (or fix it), then Re-send this message: its reply is then "
                             "saved with the session."),
}
OTHER_ERROR = ("{Server} returned an error", "Try again; check {log} if it repeats.")

# How a card names the configured server (``model_server.api``) and what it tells the user to do:
# Ollama's own commands on the Pi, neutral words for an OpenAI-compatible server (llama-server,
# vLLM: the app cannot know how it was started).
SERVER_WORDS = {
    "native": {"Server": "Ollama", "log": "the Ollama log", "start": "Start it (sudo systemctl start ollama)",
               "install_above": "On the Ollama machine, run the `ollama pull` command above.",
               "install": "install it with ollama pull"},
    "openai": {"Server": "The model server", "log": "the model server's log", "start": "Start it",
               "install_above": "Start the model server with that model, or set model_server.model to one it serves.",
               "install": "start the model server with it"},
}


def error_view(kind: str, detail: str, api: str = "native") -> dict:
    """Plain words for an error card: what happened and what to do, naming the configured kind of
    server (``api``: Ollama's commands help only with Ollama).

    Takes the kind and text (not the exception) because a card is also rebuilt
    from the note a session file keeps.
    """
    title, help = ERROR_TEXTS.get(kind, OTHER_ERROR)
    words = SERVER_WORDS.get(api, SERVER_WORDS["openai"])
    return {"title": title.format(**words), "detail": detail, "help": help.format(**words), "kind": kind,
            "resend": kind not in NOT_RESENT}


# Cards whose message would fail the same way again: no "Re-send this message" (issue 33).
NOT_RESENT = frozenset({"unreadable_file", "no_text_layer", "encrypted", "damaged", "missing_file",
                        "outside_file"})
