"""Split a document into chunks for Harvey's chunked analysis (map phase).

Design: seed 000 ("Chunking strategy", D3) and seed 002 ("Chunking").  Where
the two differ the stricter rule is used.

Algorithm
---------
1. **Load.**  A file is read as bytes, refused if binary (NUL bytes or mostly
   control bytes), decoded as UTF-8 (else replacement or Latin-1 with a note on
   the document), line endings are normalised to ``\\n``.  HTML is reduced to
   text with BeautifulSoup: headings become ``#`` lines, ``<pre>`` becomes a
   fenced block, tables become pipe tables.  ``Document.text`` is the text every
   offset refers to.
2. **Units.**  A scanner walks the text with regular expressions (no Python
   loop over characters) and yields units that tile the text exactly, each
   unit owning the whitespace after it:

   * prose / Markdown / HTML: paragraphs (blank-line separated), ATX and setext
     headings, lists, fenced code blocks, pipe tables, raw ``<table>`` blocks; a
     one-line caption ("Table 3: ..." or a line ending in ``:``) just before a
     table joins the table.  Prose (``.txt`` and unknown extensions) has no
     headings or fences.
   * source: blocks that start after a blank line followed by a *top-level*
     signature line at column 0 (``def``, ``class``, ``func``, ``fn``, ``impl``,
     C-like ``type name(`` ...), never inside a triple-quoted string or a block
     comment; leading comment/decorator lines go with the block they describe.
     Nested definitions (methods) do not start blocks.
3. **Pack.**  Units go into the open chunk in reading order until the next one
   would pass the size.  Budgets are kept in UTF-8 bytes, so the test
   ``estimate_tokens(chunk.text) <= size_tokens`` holds exactly.  With
   ``purpose="analysis"`` (the default: every chunk is one model call) a
   paragraph or list that fits a chunk but not the rest of the open one fills it
   up to a line end first, and a source block up to its last top-level statement
   start (never inside a definition).
4. **Split.**  A unit larger than a whole chunk is cut at the best boundary
   that fits: paragraph, (list item,) sentence end at a line end, line, then
   (only inside a line larger than a chunk) sentence, clause, word; a cut
   inside a word happens only when one word is larger than a whole chunk.
   Fenced code is cut at blank lines, then lines, then words; source at
   top-level statements, nested signatures, column-0 lines, blank lines, lines,
   and never inside a top-level statement that fits a chunk.  A higher-level cut
   is taken only if it keeps a quarter of the room, so a stray early paragraph
   break does not make a near-empty chunk.  Such a unit starts in the open
   chunk when a quarter of it is free (it is cut anyway).
5. **Merge.**  A heading starts a new section.  Retrieval (seed 002): if the
   open chunk holds fewer than ``min_tokens`` of its own text it carries on into
   the next section (the heading goes into the chunk text); otherwise the
   heading starts a new chunk.  Analysis (seed 000, issue 14): the heading ends
   the open chunk only when it holds ``fill`` of the room (0.75) *and* the next
   section does not fit in what is left.  ``Chunk.sections`` lists the heading
   path of every section a chunk holds (``chunk_label`` puts the first, where
   it starts, in the map prompt).  A heading stays with the first unit of its section unless the two
   together are larger than a chunk.
6. **Tables.**  A table that does not fit becomes row groups; each group
   repeats the header row, the first starts with the caption.  Retrieval: a
   table never shares a chunk with text.  Analysis: it joins the open chunk
   when it fits or the chunk is not yet filled, and text may follow it.
7. **Overlap** (seed 000).  Each chunk (except after tables) starts with the
   previous chunk's last paragraph (``paragraph``; in source the last block)
   or last sentence (``sentence``; in code the last line), at most a fifteenth
   of the budget (analysis: a thirtieth); a paragraph that is too long shrinks
   to its last sentences.
   A chunk that starts inside a section also gets that section's heading line
   (``carry_heading``).  Both count toward the size and are dropped when they
   would force a unit that fits on its own to be cut.

Offsets: ``[body_start, end)`` of consecutive chunks tile ``doc.text``;
``[start, body_start)`` is the overlap; ``chunk.text`` is ``prefix +
doc.text[start:end]`` where the prefix is empty, a carried heading, or a
repeated table header.

Everything is deterministic; ids come from the document content, its kind, the
settings fingerprint (which covers the chunker version and table rules) and the
chunk number.

Modules, by job: ``document`` (kinds, settings, errors, token estimates, the Document,
Chunk and ChunkPlan records, reading and measuring a file), ``htmltext`` (HTML to text),
``units`` (the scanner: the units that tile a text, and the cut levels), ``packer`` (units
packed into chunk spans), ``chunks`` (Chunk records and plans from a Document: the public
calls), ``labels`` (a chunk's label for the map prompt).  The map prompt itself belongs to
the analysis (``app.analysis.mapreduce.map_prompt``).  This package re-exports what callers
use, so ``from app import chunking; chunking.X`` keeps working.
"""

from __future__ import annotations

from .chunks import (chunk_document, chunk_file, chunk_text, chunks_from, plan_document, plan_file, plan_text,
                     split_chunk, halve, split_to_fit)
from .document import (ANALYSIS_FILL, ANALYSIS_OVERLAP_SHARE, CHUNKER_NAME, CHUNKER_VERSION, HEADING_SHARE,
                       HTML_EXTENSIONS, KINDS, MARKDOWN_EXTENSIONS, MIN_BUDGET_BYTES, OVERLAP_MODES, OVERLAP_SHARE,
                       PROSE_EXTENSIONS, PURPOSES, RETRIEVAL_SIZE_TOKENS, SAMPLE_BYTES, SOURCE_EXTENSIONS, TABLE_RULES, BinaryDocumentError,
                       Chunk, ChunkingError, ChunkPlan, ChunkSettings, Document, DocumentNotFoundError, Measure,
                       boundary_for_kind, estimate_tokens, kind_for_path, make_document, measure, read_document,
                       retrieval_settings, source_of, with_counter, with_settings)
from .htmltext import html_to_text
from .labels import LABEL_MAX_BYTES, PATH_SEP, chunk_label
from .units import _units  # noqa: F401  (the block scanner; its tests reach it here)

__all__ = [
    "CHUNKER_NAME", "CHUNKER_VERSION", "TABLE_RULES", "KINDS", "OVERLAP_MODES",
    "ChunkingError", "DocumentNotFoundError", "BinaryDocumentError",
    "ChunkSettings", "Document", "Chunk", "ChunkPlan", "Measure",
    "estimate_tokens", "kind_for_path", "boundary_for_kind", "html_to_text",
    "make_document", "read_document", "measure", "with_settings", "with_counter", "chunk_document", "chunks_from", "split_chunk",
    "halve", "split_to_fit", "source_of",
    "chunk_text",
    "chunk_file", "plan_document", "plan_text", "plan_file",
    "PURPOSES", "ANALYSIS_FILL", "RETRIEVAL_SIZE_TOKENS", "retrieval_settings", "LABEL_MAX_BYTES", "chunk_label",
    # the packer's shares and the file kinds' extensions (tests and benches read them)
    "OVERLAP_SHARE", "ANALYSIS_OVERLAP_SHARE", "HEADING_SHARE", "MIN_BUDGET_BYTES", "SAMPLE_BYTES",
    "MARKDOWN_EXTENSIONS", "HTML_EXTENSIONS", "PROSE_EXTENSIONS", "SOURCE_EXTENSIONS", "PATH_SEP",
]
