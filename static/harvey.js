// The little behaviour htmx does not give: Enter sends, the view follows
// the conversation, the message box clears after a send.
(function () {
  "use strict";
  document.addEventListener("keydown", function (event) {
    var box = event.target;
    if (box.id !== "message" || event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    if (window.matchMedia && matchMedia("(pointer: coarse)").matches) return;   // touch: Enter adds a line (#16 p5)
    event.preventDefault();
    var send = document.getElementById("send");
    if (box.value.trim() && send && !send.disabled) box.form.requestSubmit();
  });
  // The box is cleared of the message sent, not of one typed since (the watch can show the turn
  // before the send's answer is in, and the reader may already be typing the next).
  var sent = null;
  document.addEventListener("htmx:beforeRequest", function (event) {
    var form = event.detail.elt, box = document.getElementById("message");
    if (form && form.id === "composer" && box) sent = box.value;
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var form = event.detail.elt;
    if (form && form.id === "composer" && event.detail.successful) {
      var box = document.getElementById("message");
      if (box && box.value === sent) box.value = "";
      var hint = document.getElementById("empty-hint");
      if (hint) hint.remove();
    }
  });
  // Another device's turns (issue 45): the page's watch stream sends each turn added to the session,
  // this page's own too. A turn the page has already is never added twice: the stream's copy of a turn
  // the page shows is skipped, or swapped in where another message took that turn's place (a failed
  // message sent again on another device: the turns' keys differ; not while this page sends one again
  // from that turn itself, whose answer takes the place); this page's own answer for a turn the stream
  // brought first is dropped (below), and takes that turn's place only where another message took it.
  function turnIn(html) {
    var found = /id="(turn-\d+)"/.exec(html || "");
    return found ? document.getElementById(found[1]) : null;
  }
  function keyIn(html) {              // the key (Turn.key) of the turn in ``html``: another message in its place has another
    var found = /data-key="([^"]*)"/.exec(html || "");
    return found ? found[1] : null;
  }
  document.addEventListener("htmx:sseBeforeMessage", function (event) {
    if (event.detail.type !== "turn") return;
    var shown = turnIn(event.detail.data);
    if (shown) {
      event.preventDefault();
      var key = keyIn(event.detail.data);
      if (key !== null && shown.dataset.key !== key && !shown.querySelector(".htmx-request")) htmx.swap(shown, event.detail.data, {swapStyle: "outerHTML"});
      return;
    }
    var hint = document.getElementById("empty-hint");
    if (hint) hint.remove();
  });
  document.addEventListener("htmx:beforeSwap", function (event) {
    var detail = event.detail;
    if (!detail.target || detail.target.id !== "conversation") return;
    var shown = turnIn(detail.serverResponse);
    if (!shown) return;
    // The same turn (same key) that the stream brought first is left as it is, with what the reader did
    // on it (an opened detail, an edited instruction), and so are the send button and status it brought:
    // the answer is no newer, and the reply may have ended since.  (A failed turn sent again is answered
    // into that turn itself, HX-Retarget, and never comes here.)
    if (keyIn(detail.serverResponse) === shown.dataset.key) { detail.shouldSwap = false; return; }
    detail.target = shown;
    detail.swapOverride = "outerHTML";
  });
  // Event streams end themselves every minute or so (the server bounds them) and the
  // browser's EventSource reconnects at once with Last-Event-ID, missing nothing. That
  // normal end fires "error" with readyState CONNECTING; htmx-ext-sse does nothing with it
  // but log it as an error. Only a stream that gave up (CLOSED: refused, or a fatal
  // error) reaches the extension's handler, which reconnects with a back-off.
  if (window.htmx && window.EventSource) {
    htmx.createEventSource = function (url) {
      var source = new EventSource(url, { withCredentials: true });
      var handler = null;
      Object.defineProperty(source, "onerror", {
        configurable: true,
        get: function () { return handler; },
        set: function (fn) { handler = fn; }
      });
      source.addEventListener("error", function (event) {
        if (source.readyState === EventSource.CONNECTING) return;   // reconnecting by itself
        if (handler) handler.call(source, event);
      });
      return source;
    };
  }
  // Following the conversation as it grows: see "Follow only at the bottom" below.
})();

// -- Follow only at the bottom (issue 16, point 2) ----------------------------------------
// New text scrolls the page only when the reader was already at the bottom; a reader who
// scrolled up to read keeps their place and gets a "New text" button that takes them down.
(function () {
  "use strict";
  var SLACK = 64;          // px from the bottom that still counts as "at the bottom"
  var atBottom = true;

  function bottomGap() {
    return document.documentElement.scrollHeight - (window.scrollY + window.innerHeight);
  }
  function pill() { return document.getElementById("new-text"); }
  function toBottom() {
    window.scrollTo(0, document.documentElement.scrollHeight);
    atBottom = true;
    lastY = window.scrollY;
    var p = pill();
    if (p) p.hidden = true;
  }
  function grew() {
    if (!document.getElementById("conversation")) return;
    if (atBottom) { toBottom(); return; }
    var p = pill();
    if (p && bottomGap() > SLACK) p.hidden = false;
  }
  // Any move up is the reader's (growing text only adds below); a page that got shorter and
  // clamped the scroll is still at the bottom. A wheel or finger going up stops following at once,
  // before a smooth scroll has moved far enough to leave the bottom.
  var lastY = window.scrollY, touchY = null;
  window.addEventListener("scroll", function () {
    var y = window.scrollY, gap = bottomGap();
    if (y < lastY - 1 && gap > 1) atBottom = false;
    else if (gap <= SLACK) atBottom = true;
    lastY = y;
    if (atBottom) { var p = pill(); if (p) p.hidden = true; }
  }, { passive: true });
  window.addEventListener("wheel", function (event) { if (event.deltaY < 0) atBottom = false; }, { passive: true });
  window.addEventListener("touchstart", function (event) { touchY = event.touches[0].clientY; }, { passive: true });
  window.addEventListener("touchmove", function (event) {
    if (touchY !== null && event.touches[0].clientY > touchY + 4) atBottom = false;
  }, { passive: true });
  document.addEventListener("keydown", function (event) {
    if (/^(ArrowUp|PageUp|Home)$/.test(event.key) && !/^(TEXTAREA|INPUT|SELECT)$/.test(event.target.tagName)) atBottom = false;
  });
  document.addEventListener("htmx:afterSwap", grew);
  document.addEventListener("htmx:sseMessage", grew);
  document.addEventListener("htmx:afterRequest", function (event) {
    var form = event.detail.elt;
    if (form && form.id === "composer" && event.detail.successful) toBottom();   // your own message
  });
  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("#new-text")) toBottom();
  });
  document.addEventListener("DOMContentLoaded", function () {
    if (document.getElementById("conversation") && !location.hash) toBottom();
  });
})();

// -- Long jobs (issue 16, point 1) --------------------------------------------------------
// The progress card's clock ticks between chunks from its data attributes (no request to the
// server): data-elapsed and data-left are the server's figures when it rendered the line, counted
// on with the browser's monotonic clock. The tab title shows "[done/total]" while a job runs and
// a mark when it ends, until the reader comes back to the page.
(function () {
  "use strict";
  var baseTitle = null, hadJob = false, doneMark = false;

  function duration(seconds) {
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 60) return seconds + " s";
    var m = Math.floor(seconds / 60), s = seconds % 60;
    if (m < 60) return m + " min " + (s < 10 ? "0" : "") + s + " s";
    return Math.floor(m / 60) + " h " + (m % 60) + " min";
  }

  function tick() {
    var now = performance.now();
    document.querySelectorAll(".job-clock").forEach(function (clock) {
      if (!clock.harveySeen) clock.harveySeen = now;
      var since = (now - clock.harveySeen) / 1000;
      var elapsed = clock.querySelector(".elapsed"), left = clock.querySelector(".left");
      if (elapsed) elapsed.textContent = duration(parseFloat(clock.dataset.elapsed || "0") + since);
      if (left && clock.dataset.left !== "") {
        var rest = parseFloat(clock.dataset.left) - since;
        left.textContent = rest > 0 ? duration(rest) : "a moment";
      }
    });
    jobTitle();
  }

  function jobTitle() {
    var named = document.getElementById("title");
    if (named && named.value.trim()) baseTitle = named.value.trim() + " \u00b7 Harvey";
    else if (baseTitle === null) baseTitle = document.title;
    var clock = document.querySelector(".progress-card .job-clock");
    if (clock) {
      hadJob = true; doneMark = false;
      document.title = "[" + clock.dataset.done + "/" + clock.dataset.total + "] " + baseTitle;
    } else if (hadJob) {
      hadJob = false; doneMark = true;
      document.title = "\u2713 " + baseTitle;
    } else if (!doneMark && document.title !== baseTitle) {
      document.title = baseTitle;
    }
  }

  function seen() {
    if (doneMark && document.visibilityState === "visible") { doneMark = false; jobTitle(); }
  }

  document.addEventListener("DOMContentLoaded", function () { tick(); setInterval(tick, 1000); });
  document.addEventListener("htmx:afterSwap", jobTitle);
  document.addEventListener("htmx:sseMessage", jobTitle);
  document.addEventListener("pointerdown", seen);
  document.addEventListener("keydown", seen);
})();

// -- Copy (issue 16, point 3) -------------------------------------------------------------
// Copy a code block (the <pre> next to its button) or a whole reply (data-copy-target).
// Plain http on a LAN has no clipboard API (it needs a secure context): then the text is put
// in a hidden textarea and copied with execCommand; if even that fails, the text is selected
// so that the reader can copy it by hand.
(function () {
  "use strict";
  function textOf(button) {
    var target = button.dataset.copyTarget ? document.getElementById(button.dataset.copyTarget)
                                           : button.parentElement.querySelector("pre");
    if (!target) return "";
    var copy = target.cloneNode(true);
    copy.querySelectorAll("button").forEach(function (b) { b.remove(); });
    return button.dataset.copyTarget ? (copy.innerText || copy.textContent).trim() : copy.textContent;
  }
  function legacyCopy(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed"; area.style.top = "0"; area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    area.remove();
    return ok;
  }
  function selectForHand(button) {
    var target = button.dataset.copyTarget ? document.getElementById(button.dataset.copyTarget)
                                           : button.parentElement.querySelector("pre");
    var range = document.createRange();
    range.selectNodeContents(target);
    var sel = window.getSelection();
    sel.removeAllRanges(); sel.addRange(range);
  }
  function said(button, ok) {
    var label = button.harveyLabel || (button.harveyLabel = button.innerHTML);
    button.textContent = ok ? "Copied" : "Selected: copy it";
    button.classList.toggle("done", ok);
    if (window.harveyAnnounce) window.harveyAnnounce(ok ? "Copied." : "Text selected; copy it with your device.");
    clearTimeout(button.harveyTimer);
    button.harveyTimer = setTimeout(function () { button.innerHTML = label; button.classList.remove("done"); }, 2500);
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.copy");
    if (!button) return;
    var text = textOf(button);
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { said(button, true); }, function () {
        var ok = legacyCopy(text);
        if (!ok) selectForHand(button);
        said(button, ok);
      });
    } else {
      var ok = legacyCopy(text);
      if (!ok) selectForHand(button);
      said(button, ok);
    }
  });
})();

// -- Phone (issue 16, point 5) ------------------------------------------------------------
// A phone keyboard has no Shift+Enter: on a touch screen Enter adds a line and the Send
// button sends. The header menu closes when something outside it is tapped, or on Esc.
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("message");
    if (!box || !window.matchMedia) return;
    if (matchMedia("(pointer: coarse)").matches) box.setAttribute("enterkeyhint", "enter");
    else if (matchMedia("(min-width: 600px)").matches) box.placeholder = "Message (Enter sends, Shift+Enter for a new line)";
  });
  function closeMenu(except) {
    document.querySelectorAll("details.menu[open]").forEach(function (menu) {
      if (menu !== except) menu.open = false;
    });
  }
  document.addEventListener("click", function (event) {
    closeMenu(event.target.closest ? event.target.closest("details.menu") : null);
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    var menu = document.querySelector("details.menu[open]");
    if (menu) { event.preventDefault(); menu.open = false; menu.querySelector("summary").focus(); }
  });
})();

// -- Keyboard and screen readers (issue 16, point 6) ---------------------------------------
// One small live region (#announce) says what changed: a reply started, finished or stopped,
// an error, an analysis's chunks. When a swap removes the element that had focus (Start,
// Cancel, Stop replace their own card), focus moves to what replaced it instead of <body>.
// Esc stops a streaming reply.
(function () {
  "use strict";
  var lost = null;             // the last focused element in a turn, and that turn's id
  var replying = false, jobDone = null, jobRunning = false;

  function announce(text) {
    var region = document.getElementById("announce");
    if (!region) return;
    region.textContent = "";
    setTimeout(function () { region.textContent = text; }, 50);
  }
  window.harveyAnnounce = announce;

  // (A removed element fires no focusout in Chromium: remember where focus was instead.)
  document.addEventListener("focusin", function (event) {
    var turn = event.target.closest && event.target.closest("article.turn");
    lost = turn ? { turn: turn.id, element: event.target } : null;
  });

  function focusTarget(turn) {
    var replies = turn.querySelectorAll(".msg.reply");
    return turn.querySelector(".card h2") || replies[replies.length - 1] || turn;
  }
  function refocus() {
    if (!lost || lost.element.isConnected) return;
    var active = document.activeElement;
    if (active && active !== document.body) return;
    var turn = document.getElementById(lost.turn);
    lost = null;
    if (!turn) return;
    var target = focusTarget(turn);
    if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    target.focus({ preventScroll: false });
  }

  function states() {
    var streaming = document.querySelector(".msg.reply.streaming");
    if (streaming && !replying) { replying = true; announce("Reply started."); }
    else if (!streaming && replying) {
      replying = false;
      var turns = document.querySelectorAll("article.turn");
      var last = turns[turns.length - 1];
      if (last && last.querySelector(".card.error h2")) announce("The reply failed: " + last.querySelector(".card.error h2").textContent);
      else if (last && last.querySelector(".msg.reply.stopped")) announce("Reply stopped.");
      else announce("Reply finished.");
    }
    var clock = document.querySelector(".progress-card .job-clock");
    if (clock) {
      if (!jobRunning) { jobRunning = true; jobDone = null; announce("Analysis started."); }
      else if (jobDone !== clock.dataset.done) announce(clock.dataset.done + " of " + clock.dataset.total + " chunks done.");
      jobDone = clock.dataset.done;
    } else if (jobRunning) {
      jobRunning = false;
      var choice = document.querySelector(".card.alert h2");
      announce(choice ? choice.textContent : "Analysis finished.");
    } else {
      var err = document.querySelector("article.turn:last-of-type .card.error h2");
      if (err && !err.harveySaid) { err.harveySaid = true; announce("Error: " + err.textContent); }
    }
  }
  function changed() { refocus(); states(); }
  document.addEventListener("htmx:afterSettle", changed);
  document.addEventListener("htmx:sseMessage", changed);
  document.addEventListener("DOMContentLoaded", function () {
    replying = !!document.querySelector(".msg.reply.streaming");
    jobRunning = !!document.querySelector(".progress-card");
    var err = document.querySelector("article.turn:last-of-type .card.error h2");
    if (err) err.harveySaid = true;
  });

  // Ctrl+Shift+O (Cmd+Shift+O on a Mac): a new chat, as in other chat apps.
  document.addEventListener("keydown", function (event) {
    if (!(event.ctrlKey || event.metaKey) || !event.shiftKey || event.key.toLowerCase() !== "o") return;
    var form = document.getElementById("new-session");
    if (form) { event.preventDefault(); form.requestSubmit(); }
  });
  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("message");      // "Ask about it": the draft is ready to finish
    if (box && box.hasAttribute("autofocus")) { box.focus(); box.setSelectionRange(box.value.length, box.value.length); }
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.defaultPrevented || document.querySelector("details.menu[open], dialog[open]")) return;
    var stop = document.querySelector(".msg.reply.streaming button.stop");
    if (stop) { event.preventDefault(); stop.click(); }
  });
})();

// -- Edit and send again (issue 16, point 3 extra) ----------------------------------------
// The last message's Edit button puts its text in the box and marks the send as an edit of
// that turn (retry_of); the server records the new turn and leaves the old one out of the
// history. Cancel edit (or an empty box) makes it a plain message again.
(function () {
  "use strict";
  function stopEditing() {
    var retry = document.getElementById("retry-of"), bar = document.getElementById("editing");
    if (retry) retry.value = "";
    if (bar) bar.hidden = true;
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.edit-last");
    if (button) {
      var turn = button.dataset.editTurn, text = document.getElementById("user-text-" + turn);
      var box = document.getElementById("message"), retry = document.getElementById("retry-of");
      if (!text || !box || !retry) return;
      box.value = text.textContent;
      retry.value = turn;
      document.getElementById("editing").hidden = false;
      box.focus();
      box.setSelectionRange(box.value.length, box.value.length);
      return;
    }
    if (event.target.id === "edit-cancel") {
      stopEditing();
      var box2 = document.getElementById("message");
      if (box2) { box2.value = ""; box2.focus(); }
    }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var form = event.detail.elt;
    if (form && form.id === "composer" && event.detail.successful) stopEditing();
  });
})();

// -- Attach (issue 16, files) ---------------------------------------------------------------
// The Attach button uploads the chosen file into the workspace (htmx posts the form on change);
// the answer names the file, which is then added to the message so that it is included.
(function () {
  "use strict";
  document.addEventListener("htmx:afterSwap", function (event) {
    var status = document.getElementById("attach-status");
    if (!status || !status.dataset.attached) return;
    var name = status.dataset.attached, box = document.getElementById("message");
    delete status.dataset.attached;
    var input = document.getElementById("attach-file");
    if (input) input.value = "";
    if (box) {
      box.value = box.value.replace(/\s*$/, "") + (box.value.trim() ? " " : "") + name + " ";
      box.focus();
      // the caret after the name, whatever focus() restores (issue 45: typing after End landed inside a
      // long name, which wraps on a phone: End goes to the end of the caret's line, not of the text)
      box.setSelectionRange(box.value.length, box.value.length);
    }
    if (window.harveyAnnounce) window.harveyAnnounce(status.textContent.trim());
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var form = event.detail.elt, status = document.getElementById("attach-status");
    if (form && form.id === "composer" && event.detail.successful && status) status.hidden = true;
  });
  // The "message is empty" note (issue 33) goes when the next message is sent.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var form = event.detail.elt, note = document.getElementById("composer-note");
    if (form && form.id === "composer" && note) note.hidden = true;
  });
})();

// -- The prompt library (issue 15) ----------------------------------------------------------
// An earlier instruction's button on the alert card fills the instruction box with it (the
// box stays editable; Start sends what it holds).
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.suggestion[data-fill]");
    if (!button) return;
    var box = document.getElementById(button.dataset.fill);
    if (!box) return;
    box.value = button.dataset.text;
    box.focus();
    box.setSelectionRange(box.value.length, box.value.length);
    if (window.harveyAnnounce) window.harveyAnnounce("Instruction filled in.");
  });
})();

// -- Cited passages (issue 15) ----------------------------------------------------------------
// A citation link's passage arrives (htmx) in the passage dialog, which opens as a modal: focus
// moves into it, Esc or Close shuts it and the browser gives focus back to the citation. A tap on
// the backdrop closes it too. Without JavaScript the link opens the passage as a page.
(function () {
  "use strict";
  document.addEventListener("htmx:afterSwap", function (event) {
    var dialog = document.getElementById("passage"), target = event.detail && event.detail.target;
    if (!dialog || !target || target.id !== "passage-body") return;   // (an SSE swap has no target)
    if (!dialog.open) dialog.showModal();
    dialog.querySelector(".passage-box").scrollTop = 0;
    var title = document.getElementById("passage-title");
    if (title) title.focus();
  });
  document.addEventListener("click", function (event) {
    if (event.target.id === "passage" && event.target.open) event.target.close();
  });
})();
