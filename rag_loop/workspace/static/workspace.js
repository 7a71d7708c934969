// rag-loop workspace: keyboard shortcuts and the expected-source search. No HTML is built from
// text: every value goes in through textContent or a form value.
(function () {
  "use strict";
  function typing(event) {
    var tag = (event.target.tagName || "").toLowerCase();
    var kind = (event.target.type || "").toLowerCase();  // a radio or button takes no text
    return (tag === "input" && kind !== "radio" && kind !== "checkbox" && kind !== "button" && kind !== "submit")
      || tag === "textarea" || tag === "select" || event.target.isContentEditable;
  }

  // the queue: j / k move, Enter opens
  var rows = Array.prototype.slice.call(document.querySelectorAll("#queue tr.row"));
  var current = rows.length ? 0 : -1;
  function mark() {
    rows.forEach(function (row, i) { row.classList.toggle("current", i === current); });
    if (current >= 0) { rows[current].scrollIntoView({block: "nearest"}); }
  }
  mark();

  // the judge's verdicts on the trace page: j / k choose one, y / n agree or disagree, p / f the
  // curator's own pass / fail, x clears; each grade moves on to the next verdict
  var verdicts = Array.prototype.slice.call(document.querySelectorAll("#judge-verdicts tr.verdict"));
  var verdict = verdicts.length ? 0 : -1;
  function markVerdict() {
    verdicts.forEach(function (row, i) { row.classList.toggle("current", i === verdict); });
  }
  markVerdict();
  function choose(row, kind, value) {
    var radio = Array.prototype.filter.call(row.querySelectorAll("input." + kind),
                                            function (input) { return input.value === value; })[0];
    if (radio) { radio.checked = true; }
    return Boolean(radio);
  }
  function grade(key) {
    var row = verdicts[verdict];
    var judged = row.getAttribute("data-judge-passed");
    var done = false;
    if (key === "y" || key === "n") {
      done = choose(row, "grade", key === "y" ? "agree" : "disagree");
      if (done && row.getAttribute("data-own") === "yes") {  // the own verdict follows the grade
        var agreed = key === "y";
        choose(row, "own", (judged === "pass") === agreed ? "pass" : "fail");
      }
    } else if (key === "p" || key === "f") {
      done = choose(row, "own", key === "p" ? "pass" : "fail");
      if (done && judged !== "none") { choose(row, "grade", (judged === "pass") === (key === "p") ? "agree" : "disagree"); }
    } else if (key === "x") {
      row.querySelectorAll("input[type=radio]").forEach(function (input) { input.checked = false; });
      done = true;
    }
    if (done && key !== "x") { verdict = Math.min(verdicts.length - 1, verdict + 1); markVerdict(); }
    return done;
  }

  // the label page
  var form = document.getElementById("label-form");
  var chosen = document.getElementById("chosen-sources");
  var search = document.getElementById("source-search");
  var results = document.getElementById("source-results");
  var reason = document.getElementById("reject_reason");

  function addSource(id) {
    if (!chosen || !id) { return; }
    var exists = Array.prototype.some.call(chosen.querySelectorAll("input[name=source]"),
                                           function (input) { return input.value === id; });
    if (exists) { return; }
    var item = document.createElement("li");
    var input = document.createElement("input");
    input.type = "hidden"; input.name = "source"; input.value = id;
    var code = document.createElement("code");
    code.textContent = id;
    var remove = document.createElement("button");
    remove.type = "button"; remove.className = "remove-source"; remove.textContent = "remove";
    item.appendChild(input); item.appendChild(code); item.appendChild(document.createTextNode(" "));
    item.appendChild(remove);
    chosen.appendChild(item);
  }

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (target.classList.contains("use-source")) { addSource(target.getAttribute("data-source")); }
    if (target.classList.contains("remove-source")) { target.parentNode.remove(); }
    if (target.classList.contains("pick-source")) {
      addSource(target.getAttribute("data-source"));
      if (search) { search.focus(); }
    }
  });

  var pending = null;
  function runSearch() {
    var text = search.value;
    fetch("/sources?q=" + encodeURIComponent(text), {credentials: "same-origin"})
      .then(function (reply) {
        return reply.json().then(function (hits) { return {hits: hits, note: reply.headers.get("X-Sources-Note")}; });
      })
      .then(function (found) {
        if (search.value !== text) { return; }
        results.textContent = "";
        if (!found.hits.length && text.trim()) {
          var none = document.createElement("li");
          none.className = "missing";
          none.textContent = found.note || "no source matches";
          results.appendChild(none);
        }
        found.hits.forEach(function (hit) {
          var source = hit.source || hit.chunk_id;
          var item = document.createElement("li");
          var pick = document.createElement("button");
          pick.type = "button"; pick.className = "pick-source";
          pick.setAttribute("data-source", source);
          pick.textContent = source + (hit.newest ? "" : " (older version)");
          var about = document.createElement("span");
          about.className = "meta";
          about.textContent = " " + (hit.title || hit.doc_id) + ": " + (hit.text || "(no text: ids only)")
            + (hit.seen_in === "traces" ? " · seen in production traces" : "");
          item.appendChild(pick); item.appendChild(about);
          results.appendChild(item);
        });
      });
  }
  if (search) {
    search.addEventListener("input", function () {
      clearTimeout(pending);
      pending = setTimeout(runSearch, 150);
    });
    search.addEventListener("keydown", function (event) {
      if (event.key === "Enter") {  // pick the first hit, never submit the form
        event.preventDefault();
        var first = results.querySelector(".pick-source");
        if (first) { first.click(); }
      }
      if (event.key === "Escape") { search.blur(); }
    });
  }
  if (reason) {
    reason.addEventListener("keydown", function (event) {
      if (event.key === "Enter") { event.preventDefault(); document.getElementById("reject").click(); }
    });
  }

  // validation as you type, with the rules curated_labels applies (the server's)
  var errors = document.getElementById("errors");
  var checking = null;
  function check() {
    var body = new URLSearchParams(new FormData(form));
    body.set("action", "accept");
    fetch(form.getAttribute("data-check"), {method: "POST", body: body, credentials: "same-origin"})
      .then(function (reply) {  // a refusal (a form too large: 413) says why in its text
        if (reply.ok) { return reply.json(); }
        return reply.text().then(function (text) { return {errors: [text], warnings: []}; });
      })
      .then(function (verdict) {
        errors.textContent = "";
        verdict.errors.concat(verdict.warnings).forEach(function (text) {
          var item = document.createElement("li");
          item.textContent = text;
          errors.appendChild(item);
        });
      });
  }
  if (form && errors) {
    form.addEventListener("input", function () { clearTimeout(checking); checking = setTimeout(check, 400); });
    form.addEventListener("click", function (event) {
      if (event.target.classList.contains("pick-source") || event.target.classList.contains("use-source")
          || event.target.classList.contains("remove-source")) { clearTimeout(checking); checking = setTimeout(check, 100); }
    });
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event)) { return; }
    if (rows.length) {
      if (event.key === "j") { current = Math.min(rows.length - 1, current + 1); mark(); }
      if (event.key === "k") { current = Math.max(0, current - 1); mark(); }
      if (event.key === "Enter" && current >= 0) { window.location = rows[current].getAttribute("data-href"); }
    }
    if (verdicts.length) {
      if (event.key === "j") { verdict = Math.min(verdicts.length - 1, verdict + 1); markVerdict(); }
      if (event.key === "k") { verdict = Math.max(0, verdict - 1); markVerdict(); }
      if ("ynpfx".indexOf(event.key) >= 0 && event.key.length === 1 && grade(event.key)) { event.preventDefault(); }
    }
    if (form) {
      if (event.key === "/") { event.preventDefault(); search.focus(); }
      if (event.key === "a") { event.preventDefault(); document.getElementById("accept").click(); }
      if (event.key === "l") { event.preventDefault(); document.getElementById("later").click(); }
      if (event.key === "r") { event.preventDefault(); reason.focus(); }
      if (event.key === "e") { event.preventDefault(); document.getElementById("expected_output").focus(); }
      if (event.key === "u" && document.getElementById("undo")) { event.preventDefault(); document.getElementById("undo").click(); }
    }
  });
}());
