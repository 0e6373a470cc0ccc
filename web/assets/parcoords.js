// glassbox parallel coordinates: one vertical axis per spec field that differs between the runs
// compared, plus the chosen final metric; one line per run, coloured by that metric (viridis).
// Drag along an axis to brush a range: runs outside every brush are dimmed here and hidden from
// the final-metrics table (rows tr[data-run]); click an axis without dragging to clear its brush.
// Plain SVG built through the DOM, so the Content-Security-Policy forbids nothing it needs.
// Reads #parcoords[data-pc]: {runs: [id], axes: [{name, values: [number|string|null]}]}, the
// last axis being the metric. Without JavaScript the table alone is shown.
(function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  var VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

  function viridis(t) {
    if (!isFinite(t)) { t = 0; }
    t = Math.max(0, Math.min(1, t)) * 4;
    var i = Math.min(3, Math.floor(t));
    var u = t - i;
    var a = VIRIDIS[i];
    var b = VIRIDIS[i + 1];
    return 'rgb(' + [0, 1, 2].map(function (k) { return Math.round(a[k] + (b[k] - a[k]) * u); }).join(',') + ')';
  }

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) { parent.appendChild(e); }
    return e;
  }

  // An axis's scale: numbers linearly, anything else as evenly spaced categories.
  function scale(values) {
    var nums = values.filter(function (v) { return typeof v === 'number' && isFinite(v); });
    if (nums.length === values.filter(function (v) { return v !== null; }).length && nums.length) {
      var lo = Math.min.apply(null, nums);
      var hi = Math.max.apply(null, nums);
      if (hi === lo) { lo -= 1; hi += 1; }
      return { at: function (v) { return typeof v === 'number' ? (v - lo) / (hi - lo) : NaN; },
        ticks: [lo, (lo + hi) / 2, hi].map(function (v) { return [(v - lo) / (hi - lo), String(+v.toPrecision(4))]; }) };
    }
    var cats = [];
    values.forEach(function (v) { if (v !== null && cats.indexOf(String(v)) < 0) { cats.push(String(v)); } });
    cats.sort();
    var pos = function (i) { return cats.length === 1 ? 0.5 : i / (cats.length - 1); };
    return { at: function (v) { var i = cats.indexOf(String(v)); return i < 0 ? NaN : pos(i); },
      ticks: cats.map(function (c, i) { return [pos(i), c]; }) };
  }

  function draw(root) {
    var pc = JSON.parse(root.dataset.pc || '{}');
    var runs = pc.runs || [];
    var axes = pc.axes || [];
    if (runs.length < 2 || axes.length < 1) { return; }
    var W = Math.max(480, Math.floor(root.getBoundingClientRect().width || 720));
    var H = 320;
    var top = 30;
    var bottom = 56;
    var left = 120;
    var right = 60;
    var span = H - top - bottom;
    var gap = axes.length > 1 ? (W - left - right) / (axes.length - 1) : 0;
    var scales = axes.map(function (a) { return scale(a.values); });
    var metric = axes[axes.length - 1];
    var mScale = scales[scales.length - 1];
    var svg = el('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, class: 'pc' });
    var lines = el('g', { class: 'pc-lines' }, svg);
    var brushes = axes.map(function () { return null; });
    var bands = [];
    var paths = runs.map(function (run, r) {
      var d = axes.map(function (a, i) {
        var t = scales[i].at(a.values[r]);
        var y = isFinite(t) ? top + (1 - t) * span : H - bottom + 6;
        return (i ? 'L' : 'M') + (left + i * gap).toFixed(1) + ',' + y.toFixed(1);
      }).join('');
      var p = el('path', { d: d, fill: 'none', 'stroke-width': 2,
        stroke: viridis(mScale.at(metric.values[r])), 'data-run': run }, lines);
      var title = el('title', {}, p);
      title.textContent = run + ': ' + metric.name + ' = ' + metric.values[r];
      return p;
    });
    axes.forEach(function (a, i) {
      var x = left + i * gap;
      var g = el('g', { class: 'pc-axis', 'data-axis': a.name }, svg);
      el('line', { x1: x, x2: x, y1: top, y2: H - bottom, stroke: '#555' }, g);
      // Axis names take two rows, alternating, and are cut to the room two gaps give them
      // (about 6.5 px a character at this size), so neighbours never overlap; the full name
      // is the tooltip.
      var room = axes.length > 1 ? Math.max(4, Math.floor((2 * gap - 8) / 6.5)) : 40;
      var label = el('text', { x: x, y: H - bottom + (i % 2 ? 38 : 20), 'text-anchor': 'middle',
        'font-size': 11, class: 'pc-label' }, g);
      label.textContent = a.name.length > room ? a.name.slice(0, room - 1) + '…' : a.name;
      el('title', {}, label).textContent = a.name;
      scales[i].ticks.forEach(function (t) {
        var tx = el('text', { x: x - 6, y: top + (1 - t[0]) * span + 4, 'text-anchor': 'end', 'font-size': 10, fill: '#555' }, g);
        // Long category names (a hypothesis) are cut; the full text is the tooltip.
        tx.textContent = t[1].length > 18 ? t[1].slice(0, 17) + '…' : t[1];
        el('title', {}, tx).textContent = t[1];
      });
      bands.push(el('rect', { x: x - 8, y: top, width: 16, height: 0, class: 'pc-brush' }, g));
      el('rect', { x: x - 12, y: top - 4, width: 24, height: span + 8, fill: 'transparent', class: 'pc-hit' }, g);
    });

    // A drag that starts within 12 pixels of an axis brushes that axis.
    svg.addEventListener('mousedown', function (e) {
      var p0 = svgPoint(svg, e);
      var i = Math.round((p0.x - left) / (gap || 1));
      if (i < 0 || i >= axes.length || Math.abs(left + i * gap - p0.x) > 12) { return; }
      e.preventDefault();
      var y0 = p0.y;
      var band = bands[i];
      var moved = false;
      function move(ev) {
        var y1 = svgPoint(svg, ev).y;
        if (Math.abs(y1 - y0) < 2) { return; }
        moved = true;
        var a0 = Math.max(top, Math.min(y0, y1));
        var a1 = Math.min(H - bottom, Math.max(y0, y1));
        band.setAttribute('y', a0);
        band.setAttribute('height', a1 - a0);
        brushes[i] = [1 - (a1 - top) / span, 1 - (a0 - top) / span];
        apply();
      }
      function up() {
        document.removeEventListener('mousemove', move);
        document.removeEventListener('mouseup', up);
        if (!moved) { brushes[i] = null; band.setAttribute('height', 0); apply(); }
      }
      document.addEventListener('mousemove', move);
      document.addEventListener('mouseup', up);
    });

    function apply() {
      var shown = [];
      runs.forEach(function (run, r) {
        var ok = brushes.every(function (b, i) {
          if (!b) { return true; }
          // A line within 3 pixels of the brush counts as in it (the brush's edges are
          // drawn by hand).
          var t = scales[i].at(axes[i].values[r]);
          var slack = 3 / span;
          return isFinite(t) && t >= b[0] - slack && t <= b[1] + slack;
        });
        paths[r].classList.toggle('pc-off', !ok);
        if (ok) { shown.push(run); }
      });
      Array.prototype.forEach.call(document.querySelectorAll('tr[data-run]'), function (tr) {
        tr.hidden = shown.indexOf(tr.getAttribute('data-run')) < 0;
      });
      root.setAttribute('data-shown', shown.join(' '));
    }

    var old = root.querySelector('svg.pc');
    if (old) { old.parentNode.removeChild(old); }
    root.appendChild(svg);
    root.classList.add('interactive');
    root.setAttribute('data-shown', runs.join(' '));
  }

  function svgPoint(svg, e) {
    var p = svg.createSVGPoint();
    p.x = e.clientX;
    p.y = e.clientY;
    return p.matrixTransform(svg.getScreenCTM().inverse());
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll('#parcoords[data-pc]'), draw);
  }
  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
