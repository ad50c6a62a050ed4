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
  document.addEventListener("htmx:afterSwap", follow);
  document.addEventListener("htmx:sseMessage", follow);
  document.addEventListener("DOMContentLoaded", follow);
})();
