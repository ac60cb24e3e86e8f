// Forms from JSON Schemas, without a library: PatchbaySchemaForm.render(container, schema)
// draws a form for an object schema and returns {getValue, setValue, validate, showAllErrors}.
// The tool page's call form uses it (call-form.js); so can an MCP elicitation form (a flat
// object of strings, numbers, booleans and choices).
//
// The schema comes from an MCP server, so it is untrusted: its texts are cleaned, capped and
// set with textContent only; only local references ("#/$defs/X") are followed. What the form
// cannot express (a choice between several types, a recursive reference, a map) is a JSON
// text field for that one value. The browser checks what it can for convenience; the server
// validates for real.
(function () {
  "use strict";

  var CAP = { label: 120, hint: 500, option: 120 };
  var MAX_DEPTH = 8;        // nesting deeper than this is a JSON field
  var MAX_FIELDS = 400;     // past this many fields, the rest are JSON fields
  var MAX_OPTIONS = 500;    // a longer enum is a JSON field
  var MAX_ROWS = 1000;      // rows of one array, unless its maxItems says fewer
  var TEXTAREA_FROM = 2000; // a string allowed to be longer than this gets a textarea
  var UNSET = { unset: true };  // an empty field: the key is left out
  var forms = 0;

  // Invisible and direction-changing characters (what hostapp/mcp/sanitize.py removes).
  var INVISIBLE = /(?![\n\t])[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Cn}\u034f\u115f\u1160\u3164\uffa0]/gu;

  function hasOwn(o, k) { return Object.prototype.hasOwnProperty.call(o, k); }
  function isObj(v) { return v !== null && typeof v === "object" && !Array.isArray(v); }

  // Own properties only: a key such as "__proto__" is a key like any other.
  function put(obj, key, value) {
    Object.defineProperty(obj, key, { value: value, enumerable: true, writable: true, configurable: true });
  }

  function without(obj, key) {
    var out = {};
    Object.keys(obj).forEach(function (k) { if (k !== key) put(out, k, obj[k]); });
    return out;
  }

  function merge(base, over) {
    var out = {};
    [base, over].forEach(function (o) { Object.keys(o).forEach(function (k) { put(out, k, o[k]); }); });
    return out;
  }

  function clean(value, cap, oneLine) {
    var s = value == null ? "" : String(value);
    s = s.replace(/[\u2028\u0085]/g, "\n").replace(/\u2029/g, "\n\n").replace(INVISIBLE, "");
    if (oneLine) s = s.replace(/\s+/g, " ");
    s = s.trim();
    var chars = Array.from(s);
    return chars.length > cap ? chars.slice(0, cap - 1).join("").trimEnd() + "\u2026" : s;
  }

  // "searchArguments" -> "Search arguments", "max_results" -> "Max results", "userID" -> "User ID".
  function humanize(key) {
    var words = String(key)
      .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
      .replace(/([A-Z]+)([A-Z][a-z])/g, "$1 $2")
      .split(/[\s_\-.]+/)
      .filter(Boolean);
    if (!words.length) return String(key);
    return words.map(function (w, i) {
      if (w.length > 1 && w === w.toUpperCase()) return w;  // an acronym
      w = w.toLowerCase();
      return i === 0 ? w.charAt(0).toUpperCase() + w.slice(1) : w;
    }).join(" ");
  }

  function display(value) {
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function copy(value) {
    return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
  }

  function same(a, b) {
    return JSON.stringify(a) === JSON.stringify(b);  // values from JSON: key order aside, good enough
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text != null) node.textContent = text;
    return node;
  }

  // ---- Schemas ---------------------------------------------------------------------------

  function pointer(root, path) {
    if (path === "") return root;
    if (path.charAt(0) !== "/") return undefined;
    var node = root;
    var parts = path.slice(1).split("/");
    for (var i = 0; i < parts.length; i++) {
      var part;
      try { part = decodeURIComponent(parts[i]); } catch (e) { return undefined; }
      part = part.replace(/~1/g, "/").replace(/~0/g, "~");
      if (node === null || typeof node !== "object" || !hasOwn(node, part)) return undefined;
      node = node[part];
    }
    return node;
  }

  // Follows local references; null for one that is remote, missing or recursive.
  function deref(schema, root, seen) {
    for (var hops = 0; isObj(schema) && typeof schema.$ref === "string"; hops++) {
      var ref = schema.$ref;
      if (ref.charAt(0) !== "#" || seen.indexOf(ref) !== -1 || hops > 16) return null;
      var target = pointer(root, ref.slice(1));
      if (target === true) target = {};
      if (!isObj(target)) return null;
      seen = seen.concat([ref]);
      schema = merge(target, without(schema, "$ref"));
    }
    if (schema === true) schema = {};
    return isObj(schema) ? { schema: schema, seen: seen } : null;
  }

  function isNullSchema(s) { return isObj(s) && s.type === "null"; }

  // The schema a field shows, with "or null" taken out: anyOf/oneOf [X, {type: null}],
  // type [X, "null"], an enum with null, allOf [X]. The outer keys (title, default) win.
  function unwrap(raw, root, seen) {
    var nullable = false;
    var r = deref(raw, root, seen);
    for (var i = 0; r && i < 8; i++) {
      var s = r.schema;
      var key = Array.isArray(s.anyOf) ? "anyOf" : Array.isArray(s.oneOf) ? "oneOf" : null;
      if (key) {
        var options = s[key].filter(function (o) { return !isNullSchema(o); });
        if (options.length < s[key].length) nullable = true;
        if (options.length === 1 && isObj(options[0])) { r = deref(merge(options[0], without(s, key)), root, r.seen); continue; }
        if (options.length < s[key].length) { s = merge(s, {}); put(s, key, options); r = { schema: s, seen: r.seen }; }
        break;
      }
      if (Array.isArray(s.allOf) && s.allOf.length === 1 && isObj(s.allOf[0])) {
        r = deref(merge(s.allOf[0], without(s, "allOf")), root, r.seen);
        continue;
      }
      break;
    }
    if (!r) return null;
    var out = r.schema;
    if (Array.isArray(out.type)) {
      var types = out.type.filter(function (t) { return t !== "null"; });
      if (types.length < out.type.length) nullable = true;
      out = merge(out, {});
      put(out, "type", types.length === 1 ? types[0] : types);
    }
    if (Array.isArray(out.enum) && out.enum.indexOf(null) !== -1) {
      nullable = true;
      out = merge(out, {});
      put(out, "enum", out.enum.filter(function (v) { return v !== null; }));
    }
    return { schema: out, seen: r.seen, nullable: nullable };
  }

  // [{value, title}] for an enum, a const, or a oneOf/anyOf of consts; null otherwise.
  function choicesOf(s) {
    if (Array.isArray(s.enum)) {
      var names = Array.isArray(s.enumNames) ? s.enumNames : [];
      return s.enum.map(function (v, i) {
        return { value: v, title: typeof names[i] === "string" && names[i] ? names[i] : display(v) };
      });
    }
    if (hasOwn(s, "const")) return [{ value: s.const, title: display(s.const) }];
    var list = Array.isArray(s.oneOf) ? s.oneOf : Array.isArray(s.anyOf) ? s.anyOf : null;
    if (list && list.length && list.every(function (o) { return isObj(o) && hasOwn(o, "const"); })) {
      return list.map(function (o) {
        return { value: o.const, title: typeof o.title === "string" && o.title ? o.title : display(o.const) };
      });
    }
    return null;
  }

  function kindOf(u, root, depth) {
    var s = u.schema;
    var choices = choicesOf(s);
    if (choices) return choices.length && choices.length <= MAX_OPTIONS ? "choice" : "json";
    if (s.anyOf || s.oneOf || s.allOf || s.not || s.if || s.$ref) return "json";
    var t = s.type;
    if (t === undefined) t = isObj(s.properties) ? "object" : s.items !== undefined ? "array" : undefined;
    if (t === "string") return "text";
    if (t === "number" || t === "integer") return "number";
    if (t === "boolean") return "boolean";
    if (t === "object") return isObj(s.properties) && Object.keys(s.properties).length ? "object" : "json";
    if (t === "array") {
      if (!isObj(s.items) || s.prefixItems || depth >= MAX_DEPTH) return "json";
      var item = unwrap(s.items, root, u.seen);
      if (!item || item.nullable) return "json";
      var kind = kindOf(item, root, depth + 1);
      if (kind === "choice") return "multi";
      if (kind === "text" || kind === "number") return "list";
      if (kind === "object") return "objects";
    }
    return "json";
  }

  // ---- Checks ----------------------------------------------------------------------------

  var patterns = {};
  function regex(pattern) {
    if (!hasOwn(patterns, pattern)) {
      var re = null;
      try { re = new RegExp(pattern, "u"); } catch (e) {
        try { re = new RegExp(pattern); } catch (e2) { re = null; }
      }
      patterns[pattern] = re;
    }
    return patterns[pattern];
  }

  var FORMATS = {
    email: [/^[^\s@]+@[^\s@]+$/, "must be an email address"],
    uri: [/^[A-Za-z][A-Za-z0-9+.\-]*:[^\s]*$/, "must be a full address, like https://example.com/"],
    date: [/^\d{4}-\d{2}-\d{2}$/, "must be a date, like 2026-05-06"],
    "date-time": [/^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/,
      "must be a date and time with its time zone, like 2026-05-06T14:00:00+02:00"]
  };

  function typeOk(t, v) {
    switch (t) {
      case "string": return typeof v === "string";
      case "number": return typeof v === "number" && isFinite(v);
      case "integer": return typeof v === "number" && Number.isInteger(v);
      case "boolean": return typeof v === "boolean";
      case "null": return v === null;
      case "array": return Array.isArray(v);
      case "object": return isObj(v);
      default: return true;
    }
  }

  var TYPE_WORDS = {
    string: "text", number: "a number", integer: "a whole number", boolean: "true or false",
    "null": "null", array: "a list", object: "an object"
  };

  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  // The keywords of one level of `s` that `v` breaks, as [{keyword, message}].
  function checkValue(s, v, choose) {
    var errors = [];
    function add(keyword, message) { errors.push({ keyword: keyword, message: message }); }
    var types = typeof s.type === "string" ? [s.type] : Array.isArray(s.type) ? s.type : [];
    if (types.length && !types.some(function (t) { return typeOk(t, v); })) {
      add("type", "must be " + types.map(function (t) { return TYPE_WORDS[t] || t; }).join(" or "));
      return errors;
    }
    if (Array.isArray(s.enum) && !s.enum.some(function (x) { return same(x, v); })) add("enum", "must be one of the choices");
    if (hasOwn(s, "const") && !same(s.const, v)) add("const", "must be " + clean(display(s.const), CAP.option, true));
    if (typeof v === "number") {
      var exMin = s.exclusiveMinimum, exMax = s.exclusiveMaximum;
      if (typeof s.minimum === "number") {
        if (exMin === true ? v <= s.minimum : v < s.minimum) add("minimum", (exMin === true ? "must be more than " : "must be at least ") + s.minimum);
      }
      if (typeof exMin === "number" && v <= exMin) add("exclusiveMinimum", "must be more than " + exMin);
      if (typeof s.maximum === "number") {
        if (exMax === true ? v >= s.maximum : v > s.maximum) add("maximum", (exMax === true ? "must be less than " : "must be at most ") + s.maximum);
      }
      if (typeof exMax === "number" && v >= exMax) add("exclusiveMaximum", "must be less than " + exMax);
      if (typeof s.multipleOf === "number" && s.multipleOf > 0) {
        var q = v / s.multipleOf;
        if (Math.abs(q - Math.round(q)) > 1e-9) add("multipleOf", "must be a multiple of " + s.multipleOf);
      }
    }
    if (typeof v === "string") {
      var length = Array.from(v).length;  // code points, as JSON Schema counts
      if (typeof s.minLength === "number" && length < s.minLength) add("minLength", "must be at least " + plural(s.minLength, "character"));
      if (typeof s.maxLength === "number" && length > s.maxLength) add("maxLength", "must be at most " + plural(s.maxLength, "character") + " (it has " + length + ")");
      if (typeof s.pattern === "string") {
        var re = regex(s.pattern);
        if (re && !re.test(v)) add("pattern", "must match the pattern " + clean(s.pattern, CAP.option, true));
      }
      var format = typeof s.format === "string" && hasOwn(FORMATS, s.format) ? FORMATS[s.format] : null;
      if (format && !format[0].test(v)) add("format", format[1]);
    }
    if (Array.isArray(v)) {
      if (typeof s.minItems === "number" && v.length < s.minItems) {
        add("minItems", choose ? "choose at least " + s.minItems : "needs at least " + plural(s.minItems, "item"));
      }
      if (typeof s.maxItems === "number" && v.length > s.maxItems) {
        add("maxItems", choose ? "choose at most " + s.maxItems : "takes at most " + plural(s.maxItems, "item"));
      }
      if (s.uniqueItems === true) {
        var seen = v.map(function (x) { return JSON.stringify(x); });
        if (seen.some(function (x, i) { return seen.indexOf(x) !== i; })) add("uniqueItems", "has the same item twice");
      }
    }
    return errors;
  }

  // Everything `v` breaks in `raw`, nested (for the JSON fields), as [{path: [...], keyword, message}].
  // The depth cap, not a list of references seen, ends a recursive schema here.
  function checkDeep(raw, v, root, path, depth, out) {
    if (raw === false) { out.push({ path: path, keyword: "false", message: "is not allowed" }); return; }
    var r = deref(raw, root, []);
    if (!r || depth > MAX_DEPTH || out.length >= 20) return;
    var s = r.schema;
    checkValue(s, v, false).forEach(function (e) { out.push({ path: path, keyword: e.keyword, message: e.message }); });
    function passes(option) { var errs = []; checkDeep(option, v, root, path, depth + 1, errs); return errs.length === 0; }
    if (Array.isArray(s.anyOf) && !s.anyOf.some(passes)) out.push({ path: path, keyword: "anyOf", message: "does not match any of the allowed forms" });
    if (Array.isArray(s.oneOf)) {
      var matches = s.oneOf.filter(passes).length;
      if (matches !== 1) out.push({ path: path, keyword: "oneOf", message: matches ? "matches more than one of the allowed forms" : "does not match any of the allowed forms" });
    }
    if (Array.isArray(s.allOf)) s.allOf.forEach(function (part) { checkDeep(part, v, root, path, depth + 1, out); });
    if (isObj(v)) {
      var props = isObj(s.properties) ? s.properties : {};
      (Array.isArray(s.required) ? s.required : []).forEach(function (key) {
        if (typeof key === "string" && !hasOwn(v, key)) out.push({ path: path.concat([key]), keyword: "required", message: "required" });
      });
      Object.keys(v).forEach(function (key) {
        if (hasOwn(props, key)) checkDeep(props[key], v[key], root, path.concat([key]), depth + 1, out);
        else if (s.additionalProperties === false) out.push({ path: path.concat([key]), keyword: "additionalProperties", message: "is not an allowed key" });
        else if (isObj(s.additionalProperties)) checkDeep(s.additionalProperties, v[key], root, path.concat([key]), depth + 1, out);
      });
    }
    if (Array.isArray(v) && isObj(s.items)) {
      v.forEach(function (item, i) { checkDeep(s.items, item, root, path.concat([i]), depth + 1, out); });
    }
  }

  // ---- Date and time ---------------------------------------------------------------------

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // "2026-05-06T12:00:00Z" -> "2026-05-06T14:00:00" (the browser's time zone), for datetime-local.
  function toLocalInput(value) {
    if (typeof value !== "string" || !FORMATS["date-time"][0].test(value)) return null;
    var d = new Date(value);
    if (isNaN(d.getTime())) return null;
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  // "2026-05-06T14:00" (local) -> "2026-05-06T14:00:00+02:00": a date-time says its time zone.
  function fromLocalInput(value) {
    var m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2})(:\d{2})?(\.\d+)?$/.exec(value);
    if (!m) return value;
    var d = new Date(value);
    if (isNaN(d.getTime())) return value;
    var offset = -d.getTimezoneOffset();
    var zone = offset === 0 ? "Z" : (offset > 0 ? "+" : "-") + pad(Math.floor(Math.abs(offset) / 60)) + ":" + pad(Math.abs(offset) % 60);
    return m[1] + (m[2] || ":00") + zone;
  }

  // ---- Fields ----------------------------------------------------------------------------
  //
  // A field: {kind, key, label, required, nullable, schema, parent, el, controls, errorEl,
  //   get() -> a value or UNSET, set(value) -> problems, fill(default), children() -> fields,
  //   own() -> the errors of its own value (not its children's)}.

  function Form(container, schema, options) {
    this.container = container;
    this.rootSchema = isObj(schema) ? schema : {};
    this.options = options || {};
    this.prefix = "sf" + (++forms) + "-";
    this.ids = 0;
    this.built = 0;
    this.fields = [];  // by index, as the controls' data-sf-field says; null once removed
    this.root = null;
  }

  Form.prototype.id = function () { return this.prefix + (++this.ids); };

  // `holders`: the elements whose events are the field's (its controls, or a group's box).
  Form.prototype.register = function (field, holders) {
    var index = this.fields.push(field) - 1;
    holders.forEach(function (h) { h.setAttribute("data-sf-field", String(index)); });
  };

  Form.prototype.forget = function (field) {
    var at = this.fields.indexOf(field);
    if (at !== -1) this.fields[at] = null;
    field.children().forEach(this.forget, this);
  };

  Form.prototype.fieldOf = function (node) {
    var holder = node && node.closest ? node.closest("[data-sf-field]") : null;
    return holder && this.container.contains(holder) ? this.fields[+holder.getAttribute("data-sf-field")] || null : null;
  };

  function pathOf(field) {
    var path = [];
    for (var f = field; f.parent; f = f.parent) path.unshift(f.parent.keyOf(f));
    return path;
  }

  // Where a field is, for a list of errors: "Attendees \u203a item 2 \u203a Name".
  function trail(field) {
    var names = [];
    for (var f = field; f && f.parent; f = f.parent) names.unshift(f.label);
    return names.join(" \u203a ");
  }

  // A field's head: its label (or legend), "required", and its description as a hint.
  function head(form, field, tag, forId) {
    var attrs = { "class": "sf-label" };
    if (forId) attrs["for"] = forId;
    var label = el(tag, attrs, field.label + (field.kind === "json" ? " (JSON)" : ""));
    var top = label;
    if (field.required && !field.nullable && !field.isItem) {
      // Beside the label, not in it, so the control's name stays the label (aria-required
      // says "required"); a legend must stay its fieldset's first child, so it goes inside.
      var mark = el("span", { "class": "sf-required" }, "required");
      if (tag === "legend") label.append(" ", mark);
      else { top = el("div", { "class": "sf-head" }); top.append(label, mark); }
    }
    var parts = [top];
    if (field.hint) {
      field.hintId = (forId || form.id()) + "-hint";
      parts.push(el("p", { "class": "sf-hint", id: field.hintId }, field.hint));
    }
    return parts;
  }

  function errorHolder(field, id) {
    field.errorEl = el("p", { "class": "sf-error", id: id + "-error", hidden: "" });
    return field.errorEl;
  }

  function describe(control, field) {
    if (field.hintId) control.setAttribute("aria-describedby", field.hintId);
    if (field.required && !field.nullable && !field.isItem) control.setAttribute("aria-required", "true");
  }

  // A field of one control: head, control, error.
  function single(form, field, control, id) {
    var parts = head(form, field, "label", id);
    describe(control, field);
    field.el = el("div", { "class": "sf-field sf-" + field.kind });
    field.el.append.apply(field.el, parts.concat([control, errorHolder(field, id)]));
    field.controls = [control];
    form.register(field, [control]);
  }

  function problem(message) { return [{ path: [], message: message }]; }
  var CANNOT = "the form cannot show this value here";

  function ownLeaf(field) {
    if (field.badInput && field.badInput()) return [{ keyword: "type", message: "must be a number" }];
    var v = field.get();
    if (v === UNSET) return field.required && !field.nullable && !field.isItem ? [{ keyword: "required", message: "required" }] : [];
    return checkValue(field.schema, v, false);
  }

  // Nothing to show: undefined (no such key), or null where null means "empty".
  function empty(field, v) {
    return v === undefined || (v === null && field.nullable);
  }

  // `key`: the property's name, or null for a row of an array (and the root); `raw`: its schema.
  Form.prototype.build = function (key, raw, parent, required, depth, seen) {
    var u = unwrap(raw, this.rootSchema, seen);
    var s = u ? u.schema : (isObj(raw) ? raw : {});
    var kind = u ? kindOf(u, this.rootSchema, depth) : "json";
    if (kind === "object" && depth >= MAX_DEPTH) kind = "json";
    if (++this.built > MAX_FIELDS && parent) kind = "json";
    var isItem = key === null;
    var title = typeof s.title === "string" ? clean(s.title, CAP.label, true) : "";
    var leafItem = isItem && (kind === "text" || kind === "number");
    var field = {
      kind: kind,
      key: key,
      schema: s,
      raw: raw,
      seen: u ? u.seen : seen,
      parent: parent,
      isItem: isItem,
      required: !!required,
      nullable: u ? u.nullable : false,
      label: isItem ? "item" : title || clean(humanize(key), CAP.label, true) || "(unnamed)",
      hint: !leafItem && typeof s.description === "string" ? clean(s.description, CAP.hint, false) : "",
      touched: false,
      errors: [],
      controls: [],
      errorEl: null,
      children: function () { return []; },
      keyOf: function () { return null; },
      present: function () { return true; }
    };
    BUILDERS[kind].call(this, field, depth);
    if (!field.fill) field.fill = field.set;
    if (hasOwn(s, "default") && s.default !== null) field.fill(copy(s.default));
    else if (kind === "choice" && hasOwn(s, "const") && field.required) field.fill(copy(s.const));
    return field;
  };

  var BUILDERS = {
    text: function (field) {
      var s = field.schema, id = this.id();
      var format = typeof s.format === "string" ? s.format : "";
      var long = format === "textarea" || (typeof s.maxLength === "number" && s.maxLength > TEXTAREA_FROM) ||
        /multi-?line/i.test(field.hint);
      var type = long ? "" : { email: "email", uri: "url", date: "date", "date-time": "datetime-local" }[format] || "text";
      var control = long ? el("textarea", { id: id, rows: "4" }) : el("input", { id: id, type: type });
      if (type === "datetime-local") control.setAttribute("step", "1");  // seconds too
      if (type === "email" || type === "url") { control.setAttribute("autocapitalize", "off"); control.setAttribute("spellcheck", "false"); }
      var local = type === "datetime-local";
      single(this, field, control, id);
      field.get = function () {
        if (control.value === "") return UNSET;
        return local ? fromLocalInput(control.value) : control.value;
      };
      field.set = function (v) {
        if (empty(field, v)) { control.value = ""; return []; }
        if (typeof v !== "string") return problem(CANNOT);
        if (!local) { control.value = v; return []; }
        var shown = toLocalInput(v);
        if (shown === null) return problem("the date and time field cannot show " + clean(v, CAP.option, true));
        control.value = shown;
        return [];
      };
      field.own = function () { return ownLeaf(field); };
    },

    number: function (field) {
      var s = field.schema, id = this.id();
      var integer = s.type === "integer";
      var control = el("input", { id: id, type: "number", step: integer ? "1" : "any", inputmode: integer ? "numeric" : "decimal" });
      if (typeof s.minimum === "number") control.setAttribute("min", String(s.minimum));
      if (typeof s.maximum === "number") control.setAttribute("max", String(s.maximum));
      single(this, field, control, id);
      field.get = function () { return control.value === "" ? UNSET : Number(control.value); };
      field.badInput = function () { return control.validity.badInput; };
      field.set = function (v) {
        if (empty(field, v)) { control.value = ""; return []; }
        if (typeof v !== "number" || !isFinite(v)) return problem(CANNOT);
        control.value = String(v);
        return [];
      };
      field.own = function () { return ownLeaf(field); };
    },

    // A checkbox when the value is always true or false; otherwise "not set", Yes, No.
    boolean: function (field) {
      var s = field.schema, id = this.id();
      var box = !field.nullable && (field.required || typeof s.default === "boolean");
      var control;
      if (box) {
        control = el("input", { id: id, type: "checkbox" });
        field.el = el("div", { "class": "sf-field sf-boolean" });
        var line = el("div", { "class": "sf-check" });
        line.append(control, el("label", { "for": id, "class": "sf-label" }, field.label));
        field.el.appendChild(line);
        if (field.hint) {
          field.hintId = id + "-hint";
          field.el.appendChild(el("p", { "class": "sf-hint", id: field.hintId }, field.hint));
          control.setAttribute("aria-describedby", field.hintId);  // not aria-required: false is an answer
        }
        field.el.appendChild(errorHolder(field, id));
        field.controls = [control];
        this.register(field, [control]);
        field.get = function () { return control.checked; };
      } else {
        control = el("select", { id: id });
        [["", "not set"], ["true", "Yes"], ["false", "No"]].forEach(function (o) {
          control.appendChild(el("option", { value: o[0] }, o[1]));
        });
        single(this, field, control, id);
        field.get = function () { return control.value === "" ? UNSET : control.value === "true"; };
      }
      field.set = function (v) {
        // A checkbox cannot say "absent": it shows what the server would take, the default.
        if (empty(field, v)) { if (box) control.checked = s.default === true; else control.value = ""; return []; }
        if (typeof v !== "boolean") return problem(CANNOT);
        if (box) control.checked = v; else control.value = String(v);
        return [];
      };
      field.own = function () { return ownLeaf(field); };
    },

    choice: function (field) {
      var s = field.schema, id = this.id();
      var choices = choicesOf(s);
      var control = el("select", { id: id });
      // The empty option is there unless a required field has its default: nothing is chosen for the user.
      var preset = field.required && !field.nullable && hasOwn(s, "default") && s.default !== null;
      if (!preset) control.appendChild(el("option", { value: "" }, "\u2014"));
      choices.forEach(function (c, i) { control.appendChild(el("option", { value: String(i) }, clean(c.title, CAP.option, true))); });
      single(this, field, control, id);
      field.get = function () { return control.value === "" ? UNSET : copy(choices[+control.value].value); };
      field.set = function (v) {
        if (empty(field, v)) { control.value = ""; return []; }
        for (var i = 0; i < choices.length; i++) {
          if (same(choices[i].value, v)) { control.value = String(i); return []; }
        }
        return problem("is not one of the choices");
      };
      field.own = function () { return ownLeaf(field); };
    },

    // An array of choices: a checkbox each.
    multi: function (field) {
      var s = field.schema, form = this;
      var choices = choicesOf(unwrap(s.items, this.rootSchema, field.seen).schema);
      var group = el("fieldset", { "class": "sf-field sf-group sf-multi" });
      group.append.apply(group, head(this, field, "legend", null));
      var boxes = choices.map(function (c) {
        var id = form.id();
        var box = el("input", { id: id, type: "checkbox" });
        var line = el("div", { "class": "sf-check" });
        line.append(box, el("label", { "for": id }, clean(c.title, CAP.option, true)));
        group.appendChild(line);
        return box;
      });
      if (field.hintId) group.setAttribute("aria-describedby", field.hintId);
      group.appendChild(errorHolder(field, this.id()));
      field.el = group;
      field.describes = group;
      field.controls = boxes;
      this.register(field, boxes.concat([group]));
      field.get = function () {
        var out = [];
        boxes.forEach(function (b, i) { if (b.checked) out.push(copy(choices[i].value)); });
        return out.length || field.required || field.isItem ? out : UNSET;
      };
      field.set = function (v) {
        if (empty(field, v)) { boxes.forEach(function (b) { b.checked = false; }); return []; }
        if (!Array.isArray(v)) return problem(CANNOT);
        var found = v.map(function (x) { return choices.findIndex(function (c) { return same(c.value, x); }); });
        if (found.indexOf(-1) !== -1) return problem("has a value that is not one of the choices");
        boxes.forEach(function (b, i) { b.checked = found.indexOf(i) !== -1; });
        return [];
      };
      field.own = function () {
        var v = field.get();
        return v === UNSET ? [] : checkValue(without(s, "items"), v, true);
      };
    },

    list: function (field, depth) { rows(this, field, depth, false); },
    objects: function (field, depth) { rows(this, field, depth, true); },

    object: function (field, depth) {
      var s = field.schema, form = this;
      var isRoot = !field.parent;
      var required = Array.isArray(s.required) ? s.required : [];
      var box;
      if (isRoot) box = el("div", { "class": "sf-fields" });
      else {
        box = el("fieldset", { "class": "sf-field sf-group sf-object" });
        if (!field.isItem) box.append.apply(box, head(this, field, "legend", null));
        else if (field.hint) box.appendChild(el("p", { "class": "sf-hint" }, field.hint));
        if (field.hintId) box.setAttribute("aria-describedby", field.hintId);
      }
      var children = Object.keys(s.properties).map(function (key) {
        var child = form.build(key, s.properties[key], field, required.indexOf(key) !== -1, depth + 1, field.seen);
        box.appendChild(child.el);
        return child;
      });
      var always = isRoot || field.required || field.isItem;
      // An optional object is sent once something in it was set (typed, chosen, or by
      // setValue): its defaults alone do not make it, nor its required fields due.
      field.given = false;
      field.el = box;
      field.children = function () { return children; };
      field.keyOf = function (child) { return child.key; };
      field.get = function () {
        var out = {}, any = false;
        children.forEach(function (c) {
          var v = c.get();
          if (v === UNSET) { if (c.required && c.nullable) put(out, c.key, null); return; }
          put(out, c.key, v);
          any = true;
        });
        return always || (any && field.given) ? out : UNSET;
      };
      // An optional object left empty is left out, and its required fields with it.
      field.present = function () { return always || field.get() !== UNSET; };
      function place(v, partial) {
        if (!partial && (v === undefined || (v === null && (field.nullable || !always)))) {
          field.given = false;
          children.forEach(function (c) { c.set(undefined); });
          return v === null && !field.nullable ? problem(CANNOT) : [];
        }
        if (!isObj(v)) return problem(CANNOT);
        if (!partial) field.given = Object.keys(v).length > 0;
        var problems = [];
        Object.keys(v).forEach(function (key) {
          var child = children.find(function (c) { return c.key === key; });
          if (!child) { problems.push({ path: [key], message: "the form has no field for this key" }); return; }
          child.set(v[key]).forEach(function (p) { problems.push({ path: [key].concat(p.path), message: p.message }); });
        });
        if (!partial) children.forEach(function (c) { if (!hasOwn(v, c.key)) c.set(undefined); });
        return problems;
      }
      field.set = function (v) { return place(v, false); };
      field.fill = function (v) { place(v, true); };  // a default: over the fields' own defaults
      field.own = function () { return []; };
    },

    // Anything else: the value as JSON text.
    json: function (field, depth) {
      var id = this.id(), form = this;
      var control = el("textarea", { id: id, rows: "3", spellcheck: "false", "class": "sf-json" });
      single(this, field, control, id);
      function parse() {
        var text = control.value.trim();
        if (!text) return { value: UNSET };
        try { return { value: JSON.parse(text) }; } catch (e) { return { error: e.message }; }
      }
      field.get = function () { var r = parse(); return r.error ? UNSET : r.value; };
      field.set = function (v) {
        control.value = empty(field, v) ? "" : JSON.stringify(v, null, 2);
        return [];
      };
      field.own = function () {
        var r = parse();
        if (r.error) return [{ keyword: "json", message: "not valid JSON: " + r.error }];
        if (r.value === UNSET) return field.required && !field.nullable ? [{ keyword: "required", message: "required" }] : [];
        var found = [];
        checkDeep(field.raw, r.value, form.rootSchema, [], depth, found);
        return found.map(function (e) {
          return { keyword: e.keyword, message: (e.path.length ? e.path.join("/") + ": " : "") + e.message, inner: e.path };
        });
      };
    }
  };

  // An array of strings or numbers, or of objects: rows, each with Remove, and Add.
  function rows(form, field, depth, ofObjects) {
    var s = field.schema;
    var max = Math.min(typeof s.maxItems === "number" ? s.maxItems : MAX_ROWS, MAX_ROWS);
    var group = el("fieldset", { "class": "sf-field sf-group sf-rows" });
    group.append.apply(group, head(form, field, "legend", null));
    if (field.hintId) group.setAttribute("aria-describedby", field.hintId);
    var list = el("div", { "class": "sf-row-list" });
    var add = el("button", { type: "button", "class": "secondary small sf-add", "aria-label": "Add to " + field.label }, "Add");
    group.append(list, add, errorHolder(field, form.id()));
    field.el = group;
    field.describes = group;
    form.register(field, [group]);
    var items = [];  // [{field, row, name, remove}]

    function renumber() {
      items.forEach(function (it, i) {
        var n = i + 1;
        it.field.label = "item " + n;
        it.name.textContent = ofObjects ? "Item " + n : field.label + ", item " + n;
        it.remove.setAttribute("aria-label", "Remove item " + n + " of " + field.label);
      });
      add.disabled = items.length >= max;
    }

    function addRow() {
      var child = form.build(null, s.items, field, false, depth + 1, field.seen);
      var remove = el("button", { type: "button", "class": "secondary small sf-remove" }, "Remove");
      var it = { field: child, row: child.el, remove: remove, name: null };
      if (ofObjects) {
        it.name = el("legend", { "class": "sf-label" });
        child.el.prepend(it.name, remove);  // a legend is a fieldset's first child
        child.el.classList.add("sf-item");
      } else {
        it.name = child.el.querySelector("label");  // each row's own label, for the screen reader
        it.name.classList.add("sf-sr");
        var line = el("div", { "class": "sf-row-line" });
        line.append(child.controls[0], remove);
        child.el.insertBefore(line, child.errorEl);
        child.el.classList.add("sf-row");
      }
      remove.addEventListener("click", function () {
        var at = items.indexOf(it);
        if (at === -1) return;
        items.splice(at, 1);
        it.row.remove();
        form.forget(child);
        field.touched = true;
        form.given(field);
        renumber();
        form.refresh();
        var next = items[at] || items[at - 1];
        (next ? next.remove : add).focus();
      });
      items.push(it);
      list.appendChild(it.row);
      renumber();
      return child;
    }

    add.addEventListener("click", function () {
      if (items.length >= max) return;
      var child = addRow();
      field.touched = true;
      form.given(field);
      form.refresh();
      var first = child.el.querySelector("input, select, textarea");
      if (first) first.focus();
    });

    field.children = function () { return items.map(function (it) { return it.field; }); };
    field.keyOf = function (child) { return items.findIndex(function (it) { return it.field === child; }); };
    field.get = function () {
      var out = [];
      items.forEach(function (it) { var v = it.field.get(); if (v !== UNSET) out.push(v); });
      return out.length || field.required || field.isItem ? out : UNSET;
    };
    field.set = function (v) {
      if (!empty(field, v) && !Array.isArray(v)) return problem(CANNOT);
      while (items.length) { var it = items.pop(); it.row.remove(); form.forget(it.field); }
      var problems = [];
      (Array.isArray(v) ? v.slice(0, max) : []).forEach(function (x, i) {
        addRow().set(x).forEach(function (p) { problems.push({ path: [i].concat(p.path), message: p.message }); });
      });
      if (Array.isArray(v) && v.length > max) problems.push({ path: [], message: "has more items than the form takes" });
      renumber();
      return problems;
    };
    field.own = function () {
      var v = field.get();
      return v === UNSET ? [] : checkValue(without(s, "items"), v, false);
    };
    // A required list that needs items starts with that many empty rows.
    var start = field.required && typeof s.minItems === "number" ? Math.min(s.minItems, 20) : 0;
    for (var i = 0; i < start; i++) addRow();
    renumber();
  }

  // ---- Errors ----------------------------------------------------------------------------

  // Checks `field` and what is in it; `active`: its value is sent (not in an omitted object).
  function walk(field, active, out) {
    field.errors = active ? field.own() : [];
    field.errors.forEach(function (e) {
      out.push({ path: pathOf(field).concat(e.inner || []).join("/"), message: e.message, keyword: e.keyword, label: trail(field) });
    });
    var inner = active && field.present();
    field.children().forEach(function (c) { walk(c, inner, out); });
  }

  // Beside the field, once it was touched (or a submit was tried); gone once it is fixed.
  function show(field) {
    if (!field.errorEl) return;
    var visible = field.touched && field.errors.length > 0;
    field.errorEl.hidden = !visible;
    field.errorEl.textContent = visible ? field.errors.map(function (e) { return e.message; }).join("; ") : "";
    field.controls.forEach(function (c) {
      if (visible) c.setAttribute("aria-invalid", "true"); else c.removeAttribute("aria-invalid");
    });
    (field.describes ? [field.describes] : field.controls).forEach(function (c) {
      var ids = (c.getAttribute("aria-describedby") || "").split(/\s+/).filter(function (x) { return x && x !== field.errorEl.id; });
      if (visible) ids.push(field.errorEl.id);
      if (ids.length) c.setAttribute("aria-describedby", ids.join(" ")); else c.removeAttribute("aria-describedby");
    });
  }

  Form.prototype.validate = function () {
    var out = [];
    if (this.root) walk(this.root, true, out);
    return out;
  };

  Form.prototype.refresh = function () {
    this.validate();
    this.fields.forEach(function (f) { if (f) show(f); });
  };

  // The user set something in `field`: the optional objects around it are sent now.
  Form.prototype.given = function (field) {
    for (var f = field; f; f = f.parent) if (f.kind === "object") f.given = true;
  };

  Form.prototype.touchAll = function () {
    this.fields.forEach(function (f) { if (f) f.touched = true; });
    this.refresh();
  };

  Form.prototype.start = function () {
    var form = this, container = this.container, s = this.rootSchema;
    container.replaceChildren();
    container.classList.add("schema-form");
    var u = unwrap(s, s, []);
    var kind = u ? kindOf(u, s, 0) : "json";
    var free = u && kind === "json" && (u.schema.type === "object" || u.schema.type === undefined) &&
      !u.schema.anyOf && !u.schema.oneOf && !u.schema.allOf && !isObj(u.schema.additionalProperties) &&
      !u.schema.patternProperties;
    if (free) {  // an object that declares no properties: nothing to fill in
      container.appendChild(el("p", { "class": "muted small sf-empty" }, this.options.emptyText || "Nothing to fill in."));
      return;
    }
    if (kind === "object") this.root = this.build(null, s, null, true, 0, []);
    else {
      this.root = this.build("value", s, null, false, 0, []);  // empty: {}
      this.root.label = clean(this.options.rootLabel || "Value", CAP.label, true);
      this.root.el.querySelector(".sf-label").textContent = this.root.label + " (JSON)";
    }
    container.appendChild(this.root.el);

    container.addEventListener("input", function (ev) {
      form.given(form.fieldOf(ev.target));
      form.refresh();
    });
    container.addEventListener("change", function (ev) {
      form.given(form.fieldOf(ev.target));
      // A choice made (a select, a checkbox) is a touch; text is touched when left.
      if (ev.target.tagName === "SELECT" || ev.target.type === "checkbox") {
        var field = form.fieldOf(ev.target);
        if (field) field.touched = true;
      }
      form.refresh();
    });
    // A field left by a press elsewhere shows its error once the press is over: an error
    // appearing at once moves what is below it, and the click would miss (the Call button).
    var pressing = false, pending = false;
    document.addEventListener("pointerdown", function () { pressing = true; }, true);
    ["pointerup", "pointercancel"].forEach(function (type) {
      document.addEventListener(type, function () {
        pressing = false;
        if (pending) { pending = false; setTimeout(function () { form.refresh(); }, 0); }  // after the click
      }, true);
    });
    container.addEventListener("focusout", function (ev) {
      var field = form.fieldOf(ev.target);
      if (!field) return;
      field.touched = true;
      if (field.parent && (field.parent.kind === "list" || field.parent.kind === "objects")) field.parent.touched = true;
      if (pressing) pending = true; else form.refresh();
    });
  };

  // Draws a form for `schema` in `container` (emptied first). Options: emptyText (for an
  // object without properties), rootLabel (for a schema that is not an object of fields).
  function render(container, schema, options) {
    var form = new Form(container, schema, options);
    form.start();
    return {
      // The value: what the fields hold; empty optional fields are left out.
      getValue: function () {
        if (!form.root) return {};
        var v = form.root.get();
        return v === UNSET ? {} : v;
      },
      // Shows `value`; returns what the form could not show, as [{path, message}].
      setValue: function (value) {
        var problems = form.root ? form.root.set(value)
          : (isObj(value) && Object.keys(value).length ? problem("the form has no fields for it") : []);
        form.refresh();
        return problems.map(function (p) { return { path: p.path.join("/"), message: p.message }; });
      },
      // Every error, as [{path, message, keyword, label}]; shows none of them.
      validate: function () { return form.validate(); },
      // Shows every field's errors beside it (after a submit was tried).
      showAllErrors: function () { form.touchAll(); }
    };
  }

  window.PatchbaySchemaForm = { render: render, humanize: humanize };
})();
