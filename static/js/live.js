// Live updates: one websocket per page; elements marked data-live-fragment re-fetch
// their fragment when an event they listen to (data-live-on) arrives. Each time the
// socket opens (the first time too) every fragment is fetched again: what happened
// between the page's render (a redirect's, say) and the socket, or while it was down, is
// shown. If the socket is down, the page polls the same fragments every 20 s.
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
        // The fragment comes from our own server, rendered with auto-escaping. One that says
        // what the element shows already is not put in again: nothing a person is reading,
        // or typing into, is replaced for nothing (the fetch each time the socket opens).
        var fresh = parse(el, html);
        if (unmasked(fresh.innerHTML) === unmasked(el.innerHTML)) return;
        var typed = typedInto(el);
        el.replaceChildren.apply(el, Array.prototype.slice.call(fresh.childNodes));
        putBack(el, typed);
        document.dispatchEvent(new CustomEvent("live:updated", { detail: el }));
      })
      .catch(function () {})
      .finally(function () {
        var again = pending.get(el);
        pending.delete(el);
        if (again) refresh(el);
      });
  }

  function parse(el, html) {
    if (el.tagName === "TBODY") {
      var table = document.createElement("table");
      table.innerHTML = "<tbody>" + html + "</tbody>";
      return table.tBodies[0];
    }
    var holder = document.createElement("div");
    holder.innerHTML = html;
    return holder;
  }

  // What a person typed or chose in a fragment (a denial's reason, a ticked box) survives its
  // replacement, and so do the focus and the caret: each field is known again by its form's
  // action (which names the call or action it is about) and its name.
  function fieldKey(f) {
    var action = f.form ? f.form.getAttribute("action") || "" : "";
    var choice = f.type === "checkbox" || f.type === "radio" ? "=" + f.value : "";
    return action + "|" + f.name + choice;
  }

  function typedInto(el) {
    var typed = [];
    el.querySelectorAll("input, textarea, select").forEach(function (f) {
      if (!f.name || f.type === "hidden" || f.type === "submit") return;
      var focused = document.activeElement === f;
      var choice = f.type === "checkbox" || f.type === "radio";
      var changed = choice ? f.checked !== f.defaultChecked
        : f.tagName === "SELECT" ? Array.prototype.some.call(f.options, function (o) { return o.selected !== o.defaultSelected; })
        : f.value !== f.defaultValue;
      if (!changed && !focused) return;
      var caret = null;
      try { caret = [f.selectionStart, f.selectionEnd]; } catch (e) {}
      typed.push({ key: fieldKey(f), value: f.value, checked: f.checked, focused: focused, caret: caret });
    });
    return typed;
  }

  function putBack(el, typed) {
    if (!typed.length) return;
    var byKey = {};
    el.querySelectorAll("input, textarea, select").forEach(function (f) { if (f.name) byKey[fieldKey(f)] = f; });
    typed.forEach(function (t) {
      var f = byKey[t.key];
      if (!f) return;  // its card is gone (the call was decided meanwhile)
      if (f.type === "checkbox" || f.type === "radio") f.checked = t.checked; else f.value = t.value;
      if (t.focused) {
        f.focus();
        if (t.caret && t.caret[0] !== null) { try { f.setSelectionRange(t.caret[0], t.caret[1]); } catch (e) {} }
      }
    });
  }

  // CSRF tokens are masked anew in every response: they do not make two renders differ.
  var TOKEN = /(name="csrfmiddlewaretoken" value=")[^"]*"/g;
  function unmasked(markup) { return markup.replace(TOKEN, "$1\"").trim(); }

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
      if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
      // Subscribed from now on: catch up with whatever happened before.
      targets.forEach(refresh);
      document.dispatchEvent(new CustomEvent("live:connected"));
      document.documentElement.setAttribute("data-live", "connected");
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
