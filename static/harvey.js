// The little behaviour htmx does not give: Enter sends, the view follows
// the conversation, the message box clears after a send.
(function () {
  "use strict";
  document.addEventListener("keydown", function (event) {
    var box = event.target;
    if (box.id !== "message" || event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    var send = document.getElementById("send");
    if (box.value.trim() && send && !send.disabled) box.form.requestSubmit();
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var form = event.detail.elt;
    if (form && form.id === "composer" && event.detail.successful) {
      var box = document.getElementById("message");
      if (box) box.value = "";
      var hint = document.getElementById("empty-hint");
      if (hint) hint.remove();
    }
  });
  function follow() {
    var main = document.getElementById("conversation");
    if (main) window.scrollTo(0, document.body.scrollHeight);
  }
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
  document.addEventListener("htmx:afterSwap", follow);
  document.addEventListener("htmx:sseMessage", follow);
  document.addEventListener("DOMContentLoaded", follow);
})();
