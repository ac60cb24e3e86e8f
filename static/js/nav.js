// Keep the navigation badges (pending approvals, requests for input, dead letters) current on every page.
(function () {
  "use strict";
  if (!document.getElementById("nav-pending")) return;
  function update() {
    fetch("/nav-counts", { credentials: "same-origin" }).then(function (r) { return r.ok ? r.json() : null; }).then(function (d) {
      if (!d) return;
      [["nav-pending", d.pending], ["nav-input", d.input], ["nav-dead", d.dead]].forEach(function (pair) {
        var el = document.getElementById(pair[0]);
        if (!el || typeof pair[1] !== "number") return;
        el.textContent = pair[1];
        el.hidden = !pair[1];
      });
    }).catch(function () {});
  }
  var timer = null;
  function soon() { clearTimeout(timer); timer = setTimeout(update, 150); }
  document.addEventListener("live:connected", update);  // what changed before the socket
  document.addEventListener("live:event", function (e) {
    var t = e.detail.type;
    if (t === "call.changed" || t === "input.changed" || t === "outbox.changed" || t === "outbox.dead_letter") soon();
  });
  // A page left open while the socket is down still catches up now and then.
  setInterval(function () { if (document.documentElement.getAttribute("data-live") !== "connected") update(); }, 30000);
})();
