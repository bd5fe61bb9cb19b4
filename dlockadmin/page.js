// The admin page's only script: it asks for the admin token once per tab
// and refreshes the listing in place. Without it the page still works: each
// row then has a token field of its own, and a reload refreshes.
(function () {
  "use strict";
  var KEY = "dlockadmin.adminToken";
  var store = window.sessionStorage; // this tab only, gone when it closes; never a cookie
  var box = document.getElementById("token-box");
  var field = document.getElementById("admin-token");
  if (box && field) {
    box.hidden = false;
    var notice = document.getElementById("notice");
    if (notice && notice.hasAttribute("data-token-refused")) {
      store.removeItem(KEY); // a wrong token is not kept to be sent again
    }
    field.value = store.getItem(KEY) || "";
    field.addEventListener("change", function () { store.setItem(KEY, field.value); });
    document.getElementById("forget-token").addEventListener("click", function () {
      store.removeItem(KEY);
      field.value = "";
    });
    // On the document, so forms that a refresh brought in are covered too.
    document.addEventListener("submit", function (ev) {
      var form = ev.target;
      if (!form.classList || !form.classList.contains("unlock")) {
        return;
      }
      var token = field.value || store.getItem(KEY) || "";
      if (!token) {
        ev.preventDefault();
        field.setCustomValidity("Type the admin token first.");
        field.reportValidity();
        field.focus();
        return;
      }
      field.setCustomValidity("");
      store.setItem(KEY, token);
      var hidden = form.querySelector('input[name="admin_token"]');
      if (!hidden) {
        hidden = document.createElement("input");
        hidden.type = "hidden";
        hidden.name = "admin_token";
        form.appendChild(hidden);
      }
      hidden.value = token;
    });
  }

  // The listing refreshes in place: the filter form, the token and the
  // result of an unlock stay as they are, and the URL, which holds the
  // filter, is the one fetched again.
  var secs = parseInt(document.body.getAttribute("data-refresh"), 10);
  var live = document.getElementById("live");
  var toggle = document.getElementById("auto-refresh");
  if (secs > 0 && live && toggle) {
    document.getElementById("refresh-box").hidden = false;
    var url = new URL(window.location.href);
    url.searchParams.delete("notice");
    var busy = false;
    setInterval(function () {
      var focus = document.activeElement;
      if (busy || !toggle.checked || document.hidden || (focus && focus !== document.body && live.contains(focus))) {
        return;
      }
      busy = true;
      fetch(url.toString(), { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { return r.text(); })
        .then(function (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
          if (fresh) {
            live.innerHTML = fresh.innerHTML;
            document.body.setAttribute("data-refreshed", String(Number(document.body.getAttribute("data-refreshed") || 0) + 1));
          }
        })
        .catch(function () {})
        .then(function () { busy = false; });
    }, secs * 1000);
  }
})();
