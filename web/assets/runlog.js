// glassbox run log: follows a running attempt's log over Server-Sent Events
// (/api/v1/runs/{run}/live, `log` events) and appends each line to the page's live log, with the
// same level highlighting as the stored logs, keeping the newest line in view while "follow the
// end" is ticked. Served from /assets/runlog.js so the page's
// Content-Security-Policy can forbid inline script. Without it the page still shows the lines
// the server had when it was drawn.
(function () {
  'use strict';
  var pre = document.getElementById('live-log');
  if (!pre || !window.EventSource) { return; }
  var run = pre.dataset.run;
  var max = 2000;
  var status = document.getElementById('live-log-status');
  // Follow the end as lines arrive unless the reader unticks it (or scrolls up to read).
  var follow = document.getElementById('follow');
  window.addEventListener('wheel', function (e) {
    if (follow && e.deltaY < 0) { follow.checked = false; }
  }, { passive: true });
  var es = new EventSource('/api/v1/runs/' + encodeURIComponent(run) + '/live');
  function level(line) {
    var l = line.split(' ')[1];
    return l === 'warn' || l === 'error' ? l : 'info';
  }
  es.addEventListener('log', function (e) {
    var ev;
    try { ev = JSON.parse(e.data); } catch (err) { return; }
    if (ev.run !== run || typeof ev.line !== 'string') { return; }
    var span = document.createElement('span');
    span.className = level(ev.line);
    span.textContent = ev.line;
    pre.appendChild(span);
    pre.appendChild(document.createTextNode('\n'));
    while (pre.childNodes.length > 2 * max) { pre.removeChild(pre.firstChild); }
    pre.dataset.lines = String((parseInt(pre.dataset.lines || '0', 10) || 0) + 1);
    if (follow && follow.checked) { span.scrollIntoView({ block: 'end' }); }
  });
  es.addEventListener('status', function (e) {
    var ev;
    try { ev = JSON.parse(e.data); } catch (err) { return; }
    if (ev.run === run && status) { status.textContent = ev.status; }
    if (ev.run === run && ev.status !== 'running') { es.close(); }
  });
}());
