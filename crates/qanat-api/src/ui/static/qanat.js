// Qanat's web UI: the one script, served from the binary. Pages work without it;
// it adds what HTML cannot do alone.
"use strict";
(function () {
  // The landing page: MLflow's client prints links such as
  // <tracking uri>/#/experiments/1/runs/<id>; the part after '#' never reaches the
  // server, so it is read here and the browser sent to the matching page.
  var landing = document.getElementById("landing");
  if (landing) {
    var base = landing.getAttribute("data-base") || "/ui";
    var hash = location.hash.replace(/^#\/?/, "");
    var seg = function (s) {
      try { return encodeURIComponent(decodeURIComponent(s)); } catch (e) { return encodeURIComponent(s); }
    };
    var m, to = "/ui/";
    if ((m = hash.match(/^experiments\/([^/?#]+)\/runs\/([^/?#]+)/))) {
      to = base + "/runs/" + seg(m[2]);
    } else if ((m = hash.match(/^experiments\/([^/?#]+)/))) {
      to = base + "/experiments/" + seg(m[1]);
    } else if ((m = hash.match(/^models\/([^/?#]+)\/versions\/([^/?#]+)/))) {
      to = base + "/models/" + seg(m[1]) + "?version=" + seg(m[2]);
    } else if ((m = hash.match(/^models\/([^/?#]+)/))) {
      to = base + "/models/" + seg(m[1]);
    } else if (hash.indexOf("models") === 0) {
      to = base + "/models";
    } else if (hash !== "") {
      to = base + "/experiments";
    }
    location.replace(to);
    return;
  }

  // Forms that change something important ask first.
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { e.preventDefault(); }
  });

  // Pages of something still running (a job, a materialization) reload themselves.
  var live = document.querySelector("[data-refresh]");
  if (live) {
    var secs = parseInt(live.getAttribute("data-refresh"), 10) || 5;
    setTimeout(function () { location.reload(); }, secs * 1000);
  }

  // A followed log shows its end.
  var logs = document.querySelectorAll("pre[data-follow]");
  for (var i = 0; i < logs.length; i++) { logs[i].scrollTop = logs[i].scrollHeight; }

  // A running job's log grows in place: the server answers when there is more (or
  // after 20 s); when the attempt ends, the page reloads to show how it ended.
  var follow = document.querySelector("pre[data-log]");
  if (follow && window.fetch) {
    var url = follow.getAttribute("data-log");
    var next = parseInt(follow.getAttribute("data-offset"), 10) || 0;
    var poll = function () {
      fetch(url + "&wait=20&offset=" + next, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
        .then(function (c) {
          var atEnd = follow.scrollTop + follow.clientHeight >= follow.scrollHeight - 4;
          if (c.data) {
            follow.appendChild(document.createTextNode(c.data));
            // Keep the page light: the last 256 KiB or so.
            if (follow.textContent.length > 262144) { follow.textContent = follow.textContent.slice(-196608); }
            if (atEnd) { follow.scrollTop = follow.scrollHeight; }
          }
          next = c.next_offset;
          if (c.complete) { location.reload(); } else { setTimeout(poll, 250); }
        })
        .catch(function () { setTimeout(function () { location.reload(); }, 10000); });
    };
    poll();
  }

  // The runs table: ticking runs fills the compare link.
  var compare = document.getElementById("compare-link");
  if (compare) {
    var update = function () {
      var ids = [];
      var boxes = document.querySelectorAll("input[name=run]:checked");
      for (var j = 0; j < boxes.length; j++) { ids.push(boxes[j].value); }
      compare.setAttribute("aria-disabled", ids.length < 2 ? "true" : "false");
    };
    document.addEventListener("change", update);
    update();
  }
})();
