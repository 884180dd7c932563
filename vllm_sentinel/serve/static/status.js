// vllm-sentinel status page: refresh in place (progressive enhancement; the page works without).
// Every few seconds it fetches "?part=main" (the server-rendered content of <main>) and replaces
// only the rows that changed, so nothing flickers and the page never navigates. The rendered HTML
// is parsed inert (DOMParser) and only elements are moved in: no script from the server runs.
(function () {
  "use strict";
  var main = document.getElementById("units");
  var live = document.getElementById("live");
  if (!main || !window.fetch || !window.DOMParser) {
    return;
  }
  var query = new URLSearchParams(window.location.search);
  var seconds = Number(query.get("refresh") || document.body.getAttribute("data-refresh") || 5);
  if (!(seconds >= 1 && seconds <= 300)) {
    seconds = 5;
  }
  var failedSince = null;
  var timer = null;

  function keyed(root) {
    return Array.prototype.slice.call(root.querySelectorAll("[data-key]"));
  }

  function update(html) {
    var parsed = new DOMParser().parseFromString("<main>" + html + "</main>", "text/html");
    var fresh = parsed.querySelector("main");
    var before = keyed(main);
    var after = keyed(fresh);
    var sameShape = before.length === after.length && before.every(function (element, index) {
      return element.getAttribute("data-key") === after[index].getAttribute("data-key");
    });
    if (!sameShape) {
      // hosts or units came or went: swap the whole content at once (one repaint)
      main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes));
    } else {
      before.forEach(function (element, index) {
        if (!element.isEqualNode(after[index])) {
          element.replaceWith(document.importNode(after[index], true));
        }
      });
    }
    var summary = main.querySelector("[data-title]");
    if (summary) {
      document.title = summary.getAttribute("data-title");
    }
  }

  function report(problem) {
    if (!live) {
      return;
    }
    if (problem === null) {
      failedSince = null;
      live.hidden = true;
      live.textContent = "";
      return;
    }
    if (failedSince === null) {
      failedSince = new Date();
    }
    live.hidden = false;
    live.textContent = "Cannot reach the sentinel (" + problem + ") since " +
      failedSince.toLocaleTimeString() + ": showing the last state.";
  }

  function schedule() {
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, seconds * 1000);
  }

  function refresh() {
    if (document.hidden) {
      return; // resumed by visibilitychange
    }
    window.fetch(window.location.pathname + "?part=main", {
      cache: "no-store",
      credentials: "same-origin",
      headers: { "Accept": "text/html" }
    }).then(function (response) {
      if (!response.ok) {
        throw new Error("HTTP " + response.status);
      }
      return response.text();
    }).then(function (html) {
      update(html);
      report(null);
    }).catch(function (error) {
      report(error && error.message ? error.message : "network error");
    }).then(schedule);
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      refresh();
    }
  });
  schedule();
})();
