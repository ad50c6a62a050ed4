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
    if (baseTitle === null) baseTitle = document.title;
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
