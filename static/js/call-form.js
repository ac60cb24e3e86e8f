// The call form of a tool page: a form generated from the tool's input schema (the
// vendored JSON Editor), or raw JSON; validated here for convenience and on the server
// for real; destructive calls are confirmed in a dialog that shows the exact arguments.
(function () {
  "use strict";
  var root = document.getElementById("call-form");
  if (!root) return;
  var schema = JSON.parse(document.getElementById("input-schema").textContent);
  var needsConfirm = root.getAttribute("data-confirm") === "1";
  var holder = document.getElementById("form-editor");
  var raw = document.getElementById("raw-arguments");
  var errorsBox = document.getElementById("call-errors");
  var rawMode = false;
  var editor = null;

  // The schema comes from an MCP server: untrusted. JSON Editor keywords that render
  // links or run templates are removed, and its text cleaning (which goes through
  // innerHTML) is replaced: every text it shows is assigned as plain text anyway.
  var EDITOR_KEYWORDS = ["options", "links", "headerTemplate", "template", "watch", "enumSource", "media"];
  function scrub(node) {
    if (Array.isArray(node)) return node.map(scrub);
    if (node === null || typeof node !== "object") return node;
    var out = {};
    Object.keys(node).forEach(function (key) {
      if (EDITOR_KEYWORDS.indexOf(key) === -1) out[key] = scrub(node[key]);
    });
    return out;
  }
  schema = scrub(schema);
  if (window.JSONEditor) {
    var plain = function (text) { return text == null ? "" : String(text); };
    if (JSONEditor.AbstractTheme) JSONEditor.AbstractTheme.prototype.cleanText = plain;
    if (JSONEditor.AbstractEditor) JSONEditor.AbstractEditor.prototype.cleanText = plain;
  }

  try {
    editor = new JSONEditor(holder, {
      schema: schema,
      theme: "html",
      iconlib: null,
      ajax: false,             // never fetch a remote $ref
      disable_edit_json: true,
      disable_properties: false,
      disable_collapse: true,
      show_errors: "interaction",
      required_by_default: false,
      remove_empty_properties: true,
      use_default_values: true,
      prompt_before_delete: false
    });
  } catch (e) {
    holder.textContent = "This schema cannot be shown as a form; use raw JSON.";
    rawMode = true;
  }

  function currentValue() {
    if (rawMode) {
      var text = raw.value.trim();
      return text ? JSON.parse(text) : {};
    }
    return editor.getValue();
  }

  function showMode() {
    holder.hidden = rawMode;
    raw.hidden = !rawMode;
    document.getElementById("toggle-raw").textContent = rawMode ? "Use the form" : "Edit raw JSON";
  }

  document.getElementById("toggle-raw").addEventListener("click", function () {
    if (!rawMode) {
      raw.value = JSON.stringify(editor ? editor.getValue() : {}, null, 2);
      rawMode = true;
    } else if (editor) {
      try { editor.setValue(currentValue()); rawMode = false; } catch (e) { showErrors([{ path: "", message: "not valid JSON: " + e.message }]); }
    }
    showMode();
  });

  function showErrors(errors) {
    errorsBox.replaceChildren();
    errors.forEach(function (err) {
      var li = document.createElement("li");
      li.textContent = (err.path ? err.path + ": " : "") + err.message;
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
    try { args = currentValue(); } catch (e) { showErrors([{ path: "", message: "not valid JSON: " + e.message }]); return; }
    if (editor && !rawMode) {
      // Validate the value being sent (validate() alone answers from a cache that is
      // refreshed only on the next animation frame).
      var problems = editor.validate(args);
      if (problems.length) {
        showErrors(problems.map(function (p) { return { path: p.path.replace(/^root\.?/, "").replace(/\./g, "/"), message: p.message }; }));
        return;
      }
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
