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

  function send(args) {
    var body = new FormData();
    body.append("arguments", JSON.stringify(args));
    body.append("csrfmiddlewaretoken", root.querySelector("input[name=csrfmiddlewaretoken]").value);
    return fetch(root.getAttribute("data-url"), {
      method: "POST", body: body, credentials: "same-origin", headers: { "Accept": "application/json" }
    }).then(function (r) { return r.json().then(function (d) { return { ok: r.ok, data: d }; }); })
      .then(function (res) {
        if (!res.ok) { showErrors(res.data.errors && res.data.errors.length ? res.data.errors : [{ path: "", message: res.data.error }]); return; }
        window.location.href = res.data.url;
      });
  }

  root.addEventListener("submit", function (ev) {
    ev.preventDefault();
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
