// glassbox live updates: follows one run over Server-Sent Events and refreshes the charts the
// server renders, at most once a second. Served from /assets/live.js so the page's
// Content-Security-Policy can forbid inline script. Without it the page still works: reload it.
(function () {
  'use strict';
  var root = document.getElementById('live');
  if (!root || !window.EventSource || !window.fetch) { return; }
  var note = document.getElementById('live-note');
  var MIN_INTERVAL_MS = 1000;
  var pending = false;
  var last = 0;

  function say(text) { if (note) { note.textContent = text; } }

  function refresh() {
    last = Date.now();
    fetch(root.dataset.charts, { headers: { 'Accept': 'text/html' } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        pending = false;
        if (html !== null) { root.innerHTML = html; }
      })
      .catch(function () { pending = false; });
  }

  function schedule() {
    if (pending) { return; }
    pending = true;
    setTimeout(refresh, Math.max(0, MIN_INTERVAL_MS - (Date.now() - last)));
  }

  var events = new EventSource(root.dataset.events);
  events.addEventListener('open', function () {
    say('Connected: the charts update as steps arrive.');
  });
  events.addEventListener('point', function (e) {
    var ev = JSON.parse(e.data);
    var step = document.getElementById('last-step');
    if (step && (isNaN(Number(step.textContent)) || ev.step > Number(step.textContent))) {
      step.textContent = String(ev.step);
    }
    schedule();
  });
  events.addEventListener('status', function (e) {
    var ev = JSON.parse(e.data);
    var status = document.getElementById('run-status');
    if (status) { status.textContent = ev.status; }
    schedule();
  });
  events.addEventListener('lagged', schedule);
  events.addEventListener('error', function () { say('Disconnected; reconnecting...'); });
})();
