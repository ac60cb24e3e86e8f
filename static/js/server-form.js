// The server form shows the fields of the chosen transport only (a command for stdio, a URL
// and headers over HTTP), and sends only those: what is hidden is not sent (the host refuses
// a field that does not fit the transport). Without this script every field shows.
(function () {
  "use strict";
  document.querySelectorAll("form.server-form").forEach(function (form) {
    var transport = form.querySelector("[name=transport]");
    if (!transport) return;
    function show() {
      form.querySelectorAll("[data-transports]").forEach(function (field) {
        var forIt = field.getAttribute("data-transports").split(" ").indexOf(transport.value) !== -1;
        field.hidden = !forIt;
      });
    }
    transport.addEventListener("change", show);
    form.addEventListener("submit", function () {
      form.querySelectorAll("[data-transports][hidden] :is(input, textarea, select)").forEach(function (el) {
        el.disabled = true;
        el.setAttribute("data-unsent", "1");
      });
    });
    window.addEventListener("pageshow", function () {  // back from the next page: usable again
      form.querySelectorAll("[data-unsent]").forEach(function (el) { el.disabled = false; el.removeAttribute("data-unsent"); });
    });
    show();
  });
})();
