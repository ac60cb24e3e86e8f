// Live updates: one websocket per page; elements marked data-live-fragment re-fetch
// their fragment when an event they listen to (data-live-on) arrives. If the socket
// is down, the page polls the same fragments every 20 s, so it never goes stale.
(function () {
  "use strict";
  var targets = Array.prototype.slice.call(document.querySelectorAll("[data-live-fragment]"));
  var pending = new Map();
  var socket = null;
  var retry = 500;
  var pollTimer = null;

  function refresh(el) {
    if (pending.has(el)) { pending.set(el, true); return; }
    pending.set(el, false);
    fetch(el.getAttribute("data-live-fragment"), { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        // The fragment comes from our own server, rendered with auto-escaping.
        if (el.tagName === "TBODY") {
          var table = document.createElement("table");
          table.innerHTML = "<tbody>" + html + "</tbody>";
          el.replaceChildren.apply(el, Array.prototype.slice.call(table.tBodies[0].childNodes));
        } else {
          el.innerHTML = html;
        }
        document.dispatchEvent(new CustomEvent("live:updated", { detail: el }));
      })
      .catch(function () {})
      .finally(function () {
        var again = pending.get(el);
        pending.delete(el);
        if (again) refresh(el);
      });
  }

  function onEvent(kind, data) {
    document.dispatchEvent(new CustomEvent("live:event", { detail: { type: kind, data: data } }));
    targets.forEach(function (el) {
      var kinds = (el.getAttribute("data-live-on") || "").split(/\s+/);
      if (kinds.indexOf(kind) !== -1) refresh(el);
    });
  }

  function startPolling() {
    if (pollTimer) return;
    pollTimer = setInterval(function () { targets.forEach(refresh); }, 20000);
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/live/");
    socket.onopen = function () {
      retry = 500;
      document.documentElement.setAttribute("data-live", "connected");
      if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
    };
    socket.onmessage = function (msg) {
      try { var ev = JSON.parse(msg.data); onEvent(ev.type, ev.data || {}); } catch (e) {}
    };
    socket.onclose = function () {
      document.documentElement.setAttribute("data-live", "disconnected");
      startPolling();
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 15000);
    };
  }

  window.PatchbayLive = { refresh: refresh, on: function (fn) { document.addEventListener("live:event", function (e) { fn(e.detail.type, e.detail.data); }); } };
  connect();
})();
