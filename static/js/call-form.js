// The call form of a tool page: a form drawn from the tool's input schema (schema-form.js),
// or raw JSON; validated here for convenience and on the server for real; destructive calls
// are confirmed in a dialog that shows the exact arguments.
(function () {
  "use strict";
  var root = document.getElementById("call-form");
  if (!root) return;
  var schema = JSON.parse(document.getElementById("input-schema").textContent);
  var needsConfirm = root.getAttribute("data-confirm") === "1";
  var holder = document.getElementById("call-fields");
  var raw = document.getElementById("raw-arguments");
  var errorsBox = document.getElementById("call-errors");
  var toggle = document.getElementById("toggle-raw");
  var rawMode = false;
  var form = null;

  try {
    form = window.PatchbaySchemaForm.render(holder, schema, { emptyText: "No arguments.", rootLabel: "Arguments" });
  } catch (e) {
    holder.textContent = "This schema cannot be shown as a form; use raw JSON.";
    rawMode = true;
  }

  function rawValue() {
    var text = raw.value.trim();
    return text ? JSON.parse(text) : {};
  }

  function showMode() {
    holder.hidden = rawMode;
    raw.hidden = !rawMode;
    toggle.textContent = rawMode ? "Use the form" : "Edit raw JSON";
    toggle.hidden = rawMode && !form;
  }

  toggle.addEventListener("click", function () {
    if (!form) return;
    if (!rawMode) {
      // A JSON field that does not parse would be lost on the way: it is fixed first.
      var unreadable = form.validate().filter(function (e) { return e.keyword === "json"; });
      if (unreadable.length) { form.showAllErrors(); showErrors(unreadable); return; }
      raw.value = JSON.stringify(form.getValue(), null, 2);
      rawMode = true;
    } else {
      var value;
      try { value = rawValue(); } catch (e) { showErrors([{ path: "", message: "not valid JSON: " + e.message }]); return; }
      // What the form cannot show stays in the raw JSON: nothing is dropped on the way back.
      var problems = form.setValue(value);
      if (problems.length) {
        showErrors(problems.map(function (p) { return { path: p.path, message: p.message + " (keep editing the raw JSON)" }; }));
        return;
      }
      rawMode = false;
    }
    showErrors([]);
    showMode();
  });

  function showErrors(errors) {
    errorsBox.replaceChildren();
    errors.forEach(function (err) {
      var li = document.createElement("li");
      var where = err.label || err.path;
      li.textContent = (where ? where + ": " : "") + err.message;
      li.setAttribute("data-path", err.path || "");
      errorsBox.appendChild(li);
    });
    errorsBox.hidden = errors.length === 0;
  }

  // One call per submit: the form's key (rendered with the page) goes with every submit of
  // it, so a second one (a double click, a reload, the back button) is answered with the
  // first call. The button says the call is on its way and takes no click until it ends;
  // the call then shows under the form, live, and the next submit is a new call (new key).
  var button = document.getElementById("call-submit");
  var progress = document.getElementById("call-progress");
  var keyInput = root.querySelector("input[name=submit_key]");
  var outcome = document.getElementById("call-outcome");
  var outcomeTitle = document.getElementById("call-outcome-title");
  var outcomeLink = document.getElementById("call-outcome-link");
  var outcomeDetail = document.getElementById("call-outcome-detail");
  var busy = false;
  var shown = null;  // the call shown under the form: {id, status}
  var slowTimer = null;
  var ACTIVE = ["running", "queued"];

  function newKey() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID().replace(/-/g, "");
    return Date.now().toString(16) + Math.random().toString(16).slice(2);
  }

  // `hint`: said if the wait lasts (a server that was not running takes a second or two).
  function setBusy(on, label, hint) {
    busy = on;
    button.disabled = on;
    button.setAttribute("aria-busy", on ? "true" : "false");
    button.textContent = label;
    clearTimeout(slowTimer);
    if (progress.getAttribute("data-hint")) { progress.textContent = ""; progress.removeAttribute("data-hint"); }
    if (on && hint) {
      slowTimer = setTimeout(function () { progress.textContent = hint; progress.setAttribute("data-hint", "1"); }, 1500);
    }
  }

  function showCall(data) {
    shown = { id: data.call_id, status: data.status };
    outcome.hidden = false;
    outcomeTitle.textContent = "Call #" + data.call_id + ": " + data.status.replace(/_/g, " ");
    progress.textContent = data.repeated ? "This form was sent before: this is its call." : "";
    outcomeLink.href = data.url;
    outcomeDetail.setAttribute("data-live-fragment", data.url + "?fragment=1");
    if (window.PatchbayLive) window.PatchbayLive.refresh(outcomeDetail);
    settle();
  }

  function settle() {
    if (shown && ACTIVE.indexOf(shown.status) !== -1) {
      setBusy(true, "Running...", "In the outbox: a worker delivers it (the server may be starting).");
      return;
    }
    // Ended (or waiting for a person): the form is free, and its next submit is a new call.
    keyInput.value = newKey();
    setBusy(false, "Call again");
  }

  // The fragment is fetched after the answer, so it tells the state even when the call
  // moved before the page knew its id (an event it could not match yet).
  document.addEventListener("live:updated", function (e) {
    if (e.detail !== outcomeDetail || !shown) return;
    var badge = outcomeDetail.querySelector("#call-status");
    var status = badge && badge.getAttribute("data-status");
    if (!status) return;
    shown.status = status;
    outcomeTitle.textContent = "Call #" + shown.id + ": " + badge.textContent.trim();
    if (busy) settle();
  });

  document.addEventListener("live:connected", function () {  // a reconnect: what it missed
    if (shown && window.PatchbayLive) window.PatchbayLive.refresh(outcomeDetail);
  });

  if (window.PatchbayLive) {
    window.PatchbayLive.on(function (kind, data) {
      if (kind !== "call.changed" || !shown) return;
      var ids = data.ids || [data.id];
      if (ids.indexOf(shown.id) === -1) return;
      window.PatchbayLive.refresh(outcomeDetail);  // its badge then says the state (live:updated)
    });
  }

  function send(args) {
    if (busy) return;
    progress.textContent = "";
    setBusy(true, "Calling...", "Still working: a server that was not running takes a second or two to start.");
    var body = new FormData();
    body.append("arguments", JSON.stringify(args));
    body.append("submit_key", keyInput.value);
    body.append("csrfmiddlewaretoken", root.querySelector("input[name=csrfmiddlewaretoken]").value);
    return fetch(root.getAttribute("data-url"), {
      method: "POST", body: body, credentials: "same-origin", headers: { "Accept": "application/json" }
    }).then(function (r) { return r.json().then(function (d) { return { ok: r.ok, data: d }; }); })
      .then(function (res) {
        if (!res.ok) {
          setBusy(false, button.getAttribute("data-label"));
          showErrors(res.data.errors && res.data.errors.length ? res.data.errors : [{ path: "", message: res.data.error }]);
          return;
        }
        showCall(res.data);
      })
      .catch(function (e) {
        // Not answered (the connection dropped): the same key again finds the call if it was made.
        setBusy(false, button.getAttribute("data-label"));
        showErrors([{ path: "", message: "no answer from the host (" + e.message + "); submitting again is safe" }]);
      });
  }

  root.addEventListener("submit", function (ev) {
    ev.preventDefault();
    if (busy) return;
    var args;
    if (rawMode) {
      try { args = rawValue(); } catch (e) { showErrors([{ path: "", message: "not valid JSON: " + e.message }]); return; }
    } else {
      var problems = form.validate();
      if (problems.length) {
        form.showAllErrors();
        showErrors(problems);
        var first = holder.querySelector('[aria-invalid="true"]');
        if (first) first.focus();
        return;
      }
      args = form.getValue();
    }
    showErrors([]);
    if (!needsConfirm) { send(args); return; }
    var dialog = document.getElementById("confirm-call");
    dialog.querySelector("pre").textContent = JSON.stringify(args, null, 2);
    dialog.showModal();
    dialog.addEventListener("close", function onClose() {
      dialog.removeEventListener("close", onClose);
      if (dialog.returnValue === "confirm") send(args);
    });
  });
  showMode();
})();
