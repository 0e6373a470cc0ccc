// glassbox samples: while a run trains, adds each snapshot's completions to its run page's
// "What it writes" section as they are recorded (`samples` events of /api/v1/runs/{run}/live),
// newest first, in the markup web/src/samples.rs renders. Model output is untrusted: it goes in
// as text (textContent, never HTML), with control characters as their Unicode control pictures
// as the server shows them. A snapshot already on the page (its entry drawn by the server) is
// not added again. Served from /assets/samples.js so the page's Content-Security-Policy can
// forbid inline script; without it the page shows the snapshots recorded when it was drawn.
(function () {
  'use strict';
  var section = document.getElementById('samples');
  if (!section || !section.dataset.run || !window.EventSource) { return; }
  var run = section.dataset.run;

  // As glassbox_schemas::record::control_pictures: every C0 control but newline and tab, and
  // DEL, as its picture (U+2400 + code, U+2421 for DEL).
  function visible(text) {
    return String(text).replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, function (c) {
      var n = c.charCodeAt(0);
      return String.fromCharCode(n === 0x7f ? 0x2421 : 0x2400 + n);
    });
  }

  function el(tag, className, text) {
    var e = document.createElement(tag);
    if (className) { e.className = className; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  function blocks() {
    return Array.prototype.slice.call(section.querySelectorAll('.sample-step'));
  }

  function block(ev) {
    var div = el('div', 'sample-step');
    div.id = 'samples-step-' + ev.step;
    div.dataset.entry = String(ev.entry);
    div.appendChild(el('h3', '', 'Step ' + ev.step));
    var meta = el('p', 'meta');
    meta.appendChild(document.createTextNode(
      (ev.temperature === 0 ? 'greedy' : 'temperature ' + ev.temperature + ', seed ' + ev.seed) +
      ', up to ' + ev.max_tokens + ' tokens · entry '));
    var link = el('a', '', String(ev.entry));
    link.href = '/api/v1/entries/' + ev.entry;
    meta.appendChild(link);
    div.appendChild(meta);
    if (ev.truncated) {
      div.appendChild(el('p', 'meta samples-cut',
        'Shown in part while the run trains (' + ev.samples.length + ' of ' + ev.total +
        ' completions, long texts cut): entry ' + ev.entry + ' holds them whole.'));
    }
    var table = el('table', 'list samples');
    var head = el('thead');
    var hr = el('tr');
    hr.appendChild(el('th', '', 'Prompt'));
    hr.appendChild(el('th', '', 'Completion'));
    head.appendChild(hr);
    table.appendChild(head);
    var body = el('tbody');
    ev.samples.forEach(function (s) {
      var tr = el('tr');
      var p = el('td');
      p.appendChild(el('pre', 'sample', visible(s.prompt)));
      var c = el('td');
      c.appendChild(el('pre', 'sample completion', visible(s.text)));
      tr.appendChild(p);
      tr.appendChild(c);
      body.appendChild(tr);
    });
    table.appendChild(body);
    div.appendChild(table);
    return div;
  }

  function add(ev) {
    var shown = blocks();
    var key = String(ev.entry);
    if (shown.some(function (b) { return b.dataset.entry === key; })) { return; }
    var empty = section.querySelector('p.empty');
    if (empty) { section.removeChild(empty); }
    var intro = section.querySelector('.samples-intro');
    if (intro) { intro.hidden = false; }
    // Newest first: before the first snapshot with an older entry.
    var next = null;
    for (var i = 0; i < shown.length; i++) {
      if (Number(shown[i].dataset.entry) < ev.entry) { next = shown[i]; break; }
    }
    section.insertBefore(block(ev), next);
  }

  var es = new EventSource('/api/v1/runs/' + encodeURIComponent(run) + '/live');
  // Says the feed is connected (a test waits on it before it publishes).
  es.addEventListener('open', function () { section.dataset.live = 'open'; });
  es.addEventListener('samples', function (e) {
    var ev;
    try { ev = JSON.parse(e.data); } catch (err) { return; }
    if (!ev || ev.run !== run || !Number.isInteger(ev.entry) || !Number.isInteger(ev.step) ||
        !Array.isArray(ev.samples)) { return; }
    add(ev);
  });
  es.addEventListener('status', function (e) {
    var ev;
    try { ev = JSON.parse(e.data); } catch (err) { return; }
    if (ev.run === run && ev.status !== 'running') { es.close(); }
  });
}());
