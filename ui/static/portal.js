// relay's customer portal: the sign-in by link, and the height told to the
// page that embeds the portal. No inline script: the CSP forbids it.
(function () {
  "use strict";
  var signin = document.getElementById("signin");
  var fail = function (msg) {
    var e = document.getElementById("signin-error");
    e.textContent = msg;
    e.hidden = false;
    document.getElementById("signin-status").hidden = true;
  };
  var signIn = function () {
    // The token is in the fragment, which no server, log or Referer sees.
    // It is removed from the address bar and the history before anything
    // else, then sent once, in a POST body, for the session cookie.
    var m = /(?:^|&)token=([^&]+)/.exec(location.hash.slice(1));
    history.replaceState(null, "", location.pathname);
    document.getElementById("signin-error").hidden = true;
    document.getElementById("signin-status").hidden = false;
    if (!m) {
      fail("This page opens with the link you were given, which ends with #token=…: open that link again.");
    } else {
      fetch("/portal/session", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ token: decodeURIComponent(m[1]), tenant: decodeURIComponent(location.pathname.split("/").pop()) })
      }).then(function (r) {
        return r.json().then(function (b) { return { ok: r.ok, b: b }; });
      }).then(function (x) {
        if (x.ok) {
          location.replace(x.b.next);
        } else {
          fail(x.b.detail);
        }
      }).catch(function () {
        fail("The portal cannot be reached: check your connection and open the link again.");
      });
    }
  };
  // The add form: only the chosen kind's fields show, and only they are
  // sent (a disabled fieldset's fields are not).
  var kind = document.getElementById("kind");
  var showKind = function () {
    document.querySelectorAll("fieldset.kind-fields").forEach(function (f) {
      var on = f.getAttribute("data-kind") === kind.value;
      f.hidden = !on;
      f.disabled = !on;
    });
  };
  if (kind) {
    kind.addEventListener("change", showKind);
    showKind();
  }
  if (signin) {
    signIn();
    // Another link opened in this tab changes only the fragment: the page
    // is not loaded again.
    window.addEventListener("hashchange", function () {
      if (location.hash) {
        signIn();
      }
    });
  }
  // Embedded: tell the embedding page (only the origins allowed to frame
  // the portal) how tall the page is, so that it can size the iframe.
  var origins = (document.documentElement.getAttribute("data-frame-origins") || "").split(" ");
  if (window.parent !== window && origins[0] !== "") {
    var tell = function () {
      var h = document.documentElement.scrollHeight;
      origins.forEach(function (o) {
        window.parent.postMessage({ type: "relay-portal:height", height: h, path: location.pathname }, o);
      });
    };
    tell();
    new ResizeObserver(tell).observe(document.body);
  }
})();
