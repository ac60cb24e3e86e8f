// Copy buttons: a button with data-copy-target="<id>" copies the text of that element.
// The clipboard API where the page may use it (a secure context); elsewhere (plain http
// on another host) the text is selected and copied the old way, or left selected for the
// person to copy. The button says what happened, then goes back to what it said.
(function () {
  "use strict";
  var SHOWN_MS = 2500;

  function select(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function copyBySelecting(el) {
    select(el);
    try { return document.execCommand("copy"); } catch (e) { return false; }
  }

  function say(button, text) {
    if (!button.hasAttribute("data-copy-label")) {
      button.setAttribute("data-copy-label", button.textContent);
      button.setAttribute("data-copy-aria", button.getAttribute("aria-label") || "");
    }
    clearTimeout(button.__copyTimer);
    button.textContent = text;
    button.setAttribute("aria-label", text);
    button.__copyTimer = setTimeout(function () {
      button.textContent = button.getAttribute("data-copy-label");
      var label = button.getAttribute("data-copy-aria");
      if (label) button.setAttribute("aria-label", label); else button.removeAttribute("aria-label");
    }, SHOWN_MS);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-copy-target]") : null;
    if (!button) return;
    var source = document.getElementById(button.getAttribute("data-copy-target"));
    if (!source) return;
    var text = source.textContent;
    var writing = navigator.clipboard && window.isSecureContext
      ? navigator.clipboard.writeText(text)
      : Promise.reject(new Error("no clipboard here"));
    writing.then(
      function () { say(button, "Copied"); },
      function () { say(button, copyBySelecting(source) ? "Copied" : "Selected: press Ctrl+C"); }
    );
  });
})();
