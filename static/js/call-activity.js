// A call's page: its server's progress and log messages while it runs, as the live socket
// brings them (`call.progress`, `call.log`; nothing of it is stored). Everything a server
// says is put in as text, never as markup; the list keeps the last 200 lines.
(function () {
  "use strict";
  var section = document.getElementById("call-activity");
  if (!section || !window.PatchbayLive) return;
  var callId = Number(section.getAttribute("data-call"));
  var bar = document.getElementById("call-progress-bar");
  var words = document.getElementById("call-progress-text");
  var log = document.getElementById("call-log");
  var KEEP = 200;

  function progress(data) {
    document.getElementById("call-progress").hidden = false;
    section.hidden = false;
    if (typeof data.total === "number" && data.total > 0) {
      bar.max = data.total;
      bar.value = Math.min(data.progress, data.total);
    } else {
      bar.removeAttribute("value");  // indeterminate: how much is left is not known
    }
    var share = typeof data.total === "number" && data.total > 0 ? " of " + data.total : "";
    words.textContent = data.progress + share + (data.message ? ": " + data.message : "");
  }

  function line(data) {
    section.hidden = false;
    var item = document.createElement("li");
    item.className = "log-" + String(data.level || "info").replace(/[^a-z]/g, "");
    var level = document.createElement("span");
    level.className = "badge";
    level.textContent = data.level || "";
    item.appendChild(level);
    item.appendChild(document.createTextNode(" " + (data.logger ? data.logger + ": " : "") + (data.data || "")));
    log.appendChild(item);
    while (log.children.length > KEEP) log.removeChild(log.firstChild);
  }

  window.PatchbayLive.on(function (kind, data) {
    if (kind === "call.progress" && data.id === callId) progress(data);
    else if (kind === "call.log" && data.call_id === callId) line(data);
  });
})();
