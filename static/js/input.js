// A request for input's page: once it has ended (answered elsewhere, expired, no longer
// needed), its form goes away; the live part above (live.js) says how it ended. Nothing
// here opens the server's URL: only a person's click on its link does.
(function () {
  "use strict";
  function settle() {
    var answer = document.getElementById("input-answer");
    if (answer && document.querySelector("#input-state [data-ended]")) answer.hidden = true;
  }
  document.addEventListener("live:updated", settle);
  settle();
})();
