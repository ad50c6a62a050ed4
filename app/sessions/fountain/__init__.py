r"""Harvey session files (``.spmd``): Fountain screenplay text <-> data.

Every chat session is a Fountain screenplay laid out exactly as the terminal
Harvey (rsdoiel/harvey, ``recorder.go``) writes it, so a session can move
between the two programs and screenplay tools can open it.  This module is
pure text <-> data; the ``sessions`` module does the (atomic) file writes.

The file
========
::

    Title: Harvey Session                  <- title page: "Key: value", in order,
    Credit: Recorded by Harvey                no blank lines between keys
    Author: RSDOIEL
    Date: 2026-06-27 10:04:00
    Draft date: 2026-06-27
    Model: LLAMA3.1 (ollama)
    Backend: ollama
                                           <- two blank lines
    FADE IN:
                                           <- (two blank lines before every heading)
    INT. HARVEY AND RSDOIEL TALKING 2026-06-27 10:04:00

    Harvey and RSDOIEL are in chat mode. Model: LLAMA3.1. Workspace: /home/pi.

    RSDOIEL                                <- the user's message
    What is 2+2?

    HARVEY
    Forwarding to LLAMA3.1.

    @LLAMA3.1                              <- the reply; "@" forces a cue that a
    4                                         tool would not take as one by itself

    ollama (llama3.1:8b) · 312 reply + 1840 ctx · 18.437s · 16.9 tok/s

    >THE END.<

Every element is followed by one blank line.  Notes ``[[...]]`` record events
without content: ``[[model switch: NAME (BACKEND) at TS]]`` is written before
the user's message of the first turn on the new model (Harvey writes it after
the last turn on the old one; the reader accepts both), other notes (how a
reply was stopped or failed) after the reply.  The file ends with centred
``>THE END.<`` (see ``END_MARKER``).  A chunk analysis (design seed 000) is its
own scene, ``INT. CHUNK ANALYSIS — FILE TS``, between the TALKING scene where
HARVEY reported the overflow and a TALKING scene with no user line that
carries the synthesized answer.  A message several models answered (the
terminal Harvey's multi-model scene) is one scene: the user's line, then each
model's ``Forwarding to`` line and reply.

The reader (:func:`loads`) also takes what the terminal Harvey writes: plain
``THE END.``, ``TALKING — TS`` headings (seconds optional), a bare
``Model: X`` action, no ``Forwarding to`` line, several exchanges in one
scene, several models answering one message, HARVEY answering as the local
model, replies (and messages, chunk replies) cut into paragraphs at their
blank lines (:func:`turns` joins them again), its recorder's CHUNK ANALYSIS
scene (no instruction; ``{MODEL}`` ``(chunk i/N)`` and ``(synthesis)`` replies,
written before the turn that named the file), CRLF line ends, a BOM, and a
file torn by a crash (no end marker, a half-written last line, a cue whose
text never came).  Scenes it does not know (EXT route scenes, AGENT MODE,
SHELL, SKILL, CONTEXT RECALL ...) are kept as scenes.

Escaping of dialogue and action text
====================================
Fountain gives meaning to line shapes, so raw text changes meaning when read
back (a blank line ends a dialogue, ``# x`` is a section, ``/*`` hides the
rest of the file).  Text is written line by line and only lines that need it
change, so ordinary replies stay readable and screenplay tools still show them
as the character's dialogue:

1. An empty line inside a text is written as a line holding one zero width
   space (U+200B, ``BLANK_LINE``).  No parser (Python, Go, JavaScript) takes
   it for whitespace, so every Fountain tool keeps the dialogue going across
   the paragraph break, and the terminal Harvey's Fountain library, for which
   a line of two spaces (Fountain's own way, which older files of ours use and
   the reader still takes) is an empty line, never sees one inside a reply:
   after an empty line it reads any line without lowercase letters (````` ``` `````,
   ``| A | B |``, ``42``) as a cue whose next line replaces the reply.  An
   empty *first* line is written as a lone ``\`` instead: a cue followed by a
   blank-looking line is no cue.
2. A line a Fountain parser could take as structure gets one leading ``\``:
   its stripped form is empty or ``BLANK_LINE``, starts with ``! @ # ~ = >`` or
   with ``.`` (not ``..``), starts with ``(`` and holds a ``)`` (the terminal
   Harvey's parenthetical, after which it reads the next line as the reply),
   is ``*/``, reads ``THE END``/``LA FIN``/``FADE IN:`` in any case (where
   the terminal Harvey stops reading the file), or starts like an uppercase
   scene heading (``INT``/``EXT``/``EST``/``I/E`` + ``.``, space or ``/``).
   The *first* line of an action also gets it when it looks like a cue or a
   transition (letters, none lowercase: ``WARNING``, ``CUT TO:``); the first
   line of a dialogue only when fountain-py would take it for a cue (its cue
   name pattern: capitals, digits, spaces and ``_.'#-``: ``WARNING``, ``OK.``,
   not ``I AM HERE!`` or ``| A | B |``, which the terminal Harvey, jouvence and
   screenplain read as the dialogue it is) or like a scene heading in any case
   (``int main``), because there fountain-py would refuse the cue above it
   (issue 35: no invisible character the terminal Harvey's model does not
   need); and the first line of either when it starts with ``...`` or, in any case,
   with ``int``/``ext``/``i/e`` (``Interesting ...``): the terminal Harvey
   reads those as scene headings and would lose the reply, of which it only
   ever reads the first line.  The reader removes one ``\`` when, and only
   when, what follows the line's leading backslashes looks like structure
   (any of the above, first-line cases included); so a written line that
   already starts that way gets one more backslash.
3. Inside a line, ``/*`` and ``[[`` get a zero width space between their two
   characters, so a reply never opens a boneyard or a note (nor, on its first
   line, a note for the terminal Harvey's parser) and no backslash reaches the
   terminal Harvey's model; zero width spaces already there get one more.
   Files before issue 35 wrote ``/\*`` and ``[\[``: a run of backslashes
   there still loses one when read, and the writer adds one to such a run
   (``/\*`` in a text is written ``/\\*``).
4. A carriage return (CRLF or a lone CR in a text) is written as ``␍``
   (U+240D), and so is every other character Python's ``splitlines`` (and so
   fountain-py) breaks a line at, each as a symbol of its own (VT ``␋``, FF ``␌``,
   FS/GS/RS ``␜␝␞``, NEL ``␤``, U+2028 ``⏎``, U+2029 ``❡``): a reader that split
   there would see a line no rule had checked. Backslashes right before one of
   them or its symbol are doubled and a literal symbol gets one more, as in C
   string escapes.

Each rule is a bijection on its own pattern and the patterns do not overlap,
so any ``str`` reads back exactly (the tests check it with hypothesis).  The
reader decodes Harvey's unescaped files too; that changes only lines that
happen to contain these escape shapes (``/\*``, ``[\[``, ``␍``, or a
backslash before Fountain syntax), which Harvey's text practically never does.
Inside a TALKING scene a cue starts a new reply only when it names a participant
the file introduced (the scene's user, HARVEY, the title page's model, a model of
a ``Forwarding to``, ``Routing to`` or state line); any other capitals line after a
reply's blank line (the terminal Harvey writes replies raw) is that reply's text,
with the parenthetical-looking line under it.  A heading whose time stamp is
followed by more text (Harvey's design documents annotate headings) is a heading.
Headings, notes and title-page values are one-line metadata: line breaks
become spaces and ``/*``, ``[[``, ``]]`` are spaced apart, when written and
when read.

API
===
Data: :class:`Element`, :class:`Scene`, :class:`Screenplay`, :class:`Answer`.
Text: :func:`dumps`, :func:`loads`, :func:`read_file`.
Chat: :class:`Turn`, :func:`turns`, :func:`chat_scene`, :func:`turn_scenes`,
:func:`model_cue`, :func:`stats_line`, :func:`new_title_page`,
:func:`model_switch_note`.
Chunk analysis: :class:`ChunkAnalysis`, :func:`chunk_scene`,
:func:`read_chunk_scene`.

Modules, by job: ``data`` (the dataclasses), ``codec`` (escaping, cues, the writer),
``parser`` (the reader), ``turns`` (turns <-> TALKING scenes), ``chunks`` (the chunk
analysis scene).  This package re-exports what callers use.
"""

from __future__ import annotations

from .chunks import SYNTHESIZING, chunk_scene, passage_notes, read_chunk_scene
from .codec import (BLANK_LINE, _decode_line, _decode_text, _encode_line, _encode_text, dump_scene, dumps,
                    join_file, model_cue)
from .data import (CHUNK_DONE, END_MARKER, HARVEY, TS_FORMAT, Answer, ChunkAnalysis, CitedPassage, Element, Scene,
                   Screenplay, Turn)
from .parser import loads, read_file
from .turns import (chat_scene, mention_note, model_switch_note, new_title_page, reply_tokens, split_mention,
                    stats_figures, stats_line, turn_scenes, turns)

__all__ = [
    "Element",
    "Scene",
    "Screenplay",
    "Turn",
    "ChunkAnalysis",
    "dumps",
    "loads",
    "read_file",
    "turns",
    "chat_scene",
    "turn_scenes",
    "chunk_scene",
    "read_chunk_scene",
    "model_cue",
    "stats_line",
    "reply_tokens",
    "stats_figures",
    "new_title_page",
    "model_switch_note",
]
