// glassbox charts: turns the server-drawn SVG charts into interactive uPlot charts, fed by the
// metric API. Served from /assets/charts.js after /assets/vendor/uplot-1.6.32/uPlot.iife.min.js,
// so the Content-Security-Policy can forbid inline script and style (uPlot positions its parts
// through the CSSOM, which the policy allows). Without JavaScript the SVGs stay: every chart is
// still shown, and the controls form reloads the page.
//
// The page says what to draw in data attributes: a figure.chart[data-series] lists its lines as
// JSON [{run, name, label}], or [{run, label, points, markers}] for a line whose points are in the
// page (an evaluation's results: placed on the x axis by the run's counters like any line, with
// a marker per point, never smoothed); figure.heatmap[data-heatmap] is an expert-load heatmap the server
// redraws for a step range; #parcoords[data-pc] holds a parallel-coordinates set; the element
// with [data-live] lists runs to follow over Server-Sent Events. View state (smooth, logy, x,
// from, to) lives in the URL, so a view is shareable.
//
// Zoom: drag across any chart; every chart and heatmap of the page refetches the step range at
// its pixel width (the API downsamples with LTTB within the range, so deep enough every recorded
// point is drawn). Double-click resets. The cursor is shared by every chart of the page.
(function () {
  'use strict';
  var U = window.uPlot;
  if (!U || !window.fetch || !document.querySelector) { return; }

  var COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
    '#7f7f7f', '#bcbd22', '#17becf'];
  var X_LABEL = { step: 'step', tokens: 'tokens', flops: 'FLOPs', time: 'training time (s)' };
  var TOKENS = 'throughput/total_tokens';
  var TPS = 'throughput/tokens_per_second';
  var MAPPING_POINTS = 4000;

  var q = new URLSearchParams(location.search);
  var view = {
    smooth: Math.min(0.999, Math.max(0, parseFloat(q.get('smooth')) || 0)),
    logy: q.get('logy') === '1',
    x: X_LABEL[q.get('x')] ? q.get('x') : 'step',
    from: whole(q.get('from')),
    to: whole(q.get('to'))
  };
  var charts = [];
  var heatmaps = [];
  var xmaps = {};
  var zooms = [];
  window.glassboxCharts = charts;
  window.glassboxZooms = zooms;
  window.glassboxCsp = [];
  document.addEventListener('securitypolicyviolation', function (e) {
    window.glassboxCsp.push(e.violatedDirective + ' ' + e.blockedURI);
  });

  function whole(s) {
    if (s === null || s === '' || !/^\d+$/.test(s)) { return null; }
    return Number(s);
  }

  function encodePath(s) { return s.split('/').map(encodeURIComponent).join('/'); }

  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) { return '–'; }
    var a = Math.abs(v);
    if (v !== 0 && (a >= 1e6 || a < 1e-3)) { return v.toExponential(3); }
    return a >= 100 ? v.toFixed(1) : v.toPrecision(5);
  }

  // Axis labels with as many digits as the tick spacing needs (zoomed into step 654,300 the
  // ticks must not all read 6.5e+5). On a log scale uPlot hands over null for the splits it
  // leaves unlabelled and the spacing grows with the value, so each label is formatted on its
  // own there.
  function ticks(u, splits, axisIdx) {
    var axis = u.axes[axisIdx];
    var scale = axis && u.scales[axis.scale];
    if (scale && scale.distr === 3) { return splits.map(fmtLogTick); }
    var shown = splits.filter(function (v) { return v !== null && isFinite(v); });
    var step = shown.length > 1 ? Math.abs(shown[1] - shown[0]) : 0;
    // One count of digits for the whole axis (the largest label's), so 2.0e+10 and 1.4e+11
    // read alike.
    var largest = shown.reduce(function (m, v) { return Math.max(m, Math.abs(v)); }, 0);
    return splits.map(function (v) {
      return v === null || !isFinite(v) ? '' : fmtTick(v, step, largest);
    });
  }

  // A label on a log axis: 1, 20, 300, 0.05, 2e+6; nothing for a split uPlot skips.
  function fmtLogTick(v) {
    if (v === null || !isFinite(v) || v <= 0) { return ''; }
    if (v >= 1e5 || v < 1e-3) { return v.toExponential(0); }
    return String(Number(v.toPrecision(2)));
  }

  // A y axis as wide as its longest label (about 7 px a character at 12 px) and its title.
  function axisSize(u, values) {
    var n = 4;
    (values || []).forEach(function (v) { n = Math.max(n, String(v).length); });
    return 28 + 7 * n;
  }

  // The decimals a tick spacing needs to be written exactly: 0.25 needs 2 (with 1, the ticks
  // 0.25 and 0.75 would read 0.3 and 0.8), 0.1 needs 1, 20 needs none.
  function decimals(step) {
    var d = 0;
    while (d < 12) {
      var scaled = step * Math.pow(10, d);
      if (Math.abs(scaled - Math.round(scaled)) <= 1e-9 * Math.max(1, scaled)) { break; }
      d++;
    }
    return d;
  }

  function fmtTick(v, step, largest) {
    var a = Math.abs(v);
    if (v === 0) { return '0'; }
    // Whole numbers print whole while they fit a tick (steps up to ten million); beyond that,
    // FLOPs and tokens print in scientific notation, or neighbouring labels run together.
    if (a >= 1e5 && a < 1e7 && step >= 1 && Math.round(v) === v) { return String(v); }
    if (a >= 1e5 || a < 1e-3) {
      var digits = step > 0 ? Math.ceil(Math.log10(Math.max(a, largest || 0) / step)) + 1 : 2;
      return v.toExponential(Math.max(0, Math.min(12, digits - 1)));
    }
    var dec = step > 0 ? Math.max(-Math.floor(Math.log10(step)), decimals(step)) : 4;
    return v.toFixed(Math.max(0, Math.min(12, dec)));
  }

  // --- the metric API ------------------------------------------------------------------------

  function series(run, name, from, to, maxPoints) {
    var p = new URLSearchParams();
    if (from !== null) { p.set('from', String(from)); }
    if (to !== null) { p.set('to', String(to)); }
    p.set('max_points', String(maxPoints));
    var url = '/api/v1/runs/' + encodeURIComponent(run) + '/metrics/' + encodePath(name) + '?' + p;
    return fetch(url, { headers: { Accept: 'application/json' } }).then(function (r) {
      if (r.status === 404) { return { points: [], total_points: 0 }; }
      if (!r.ok) { throw new Error(url + ': HTTP ' + r.status); }
      return r.json();
    });
  }

  // Requests for one run and range made in the same tick travel as one batch request
  // (/api/v1/runs/{run}/series?name=...): a page of twelve charts zooms with one request per
  // run instead of twelve.
  var batches = {};
  function batched(run, name, from, to, maxPoints) {
    var key = [run, from, to, maxPoints].join('\n');
    var b = batches[key];
    if (!b) {
      b = batches[key] = { run: run, from: from, to: to, max: maxPoints, names: [], waiters: {} };
      Promise.resolve().then(function () { flush(key); });
    }
    return new Promise(function (resolve, reject) {
      if (!b.waiters[name]) { b.waiters[name] = []; b.names.push(name); }
      b.waiters[name].push([resolve, reject]);
    });
  }

  function flush(key) {
    var b = batches[key];
    delete batches[key];
    var p = new URLSearchParams();
    b.names.forEach(function (n) { p.append('name', n); });
    if (b.from !== null) { p.set('from', String(b.from)); }
    if (b.to !== null) { p.set('to', String(b.to)); }
    p.set('max_points', String(b.max));
    var url = '/api/v1/runs/' + encodeURIComponent(b.run) + '/series?' + p;
    fetch(url, { headers: { Accept: 'application/json' } }).then(function (r) {
      if (!r.ok) { throw new Error(url + ': HTTP ' + r.status); }
      return r.json();
    }).then(function (got) {
      got.series.forEach(function (s) {
        (b.waiters[s.name] || []).forEach(function (w) { w[0](s); });
      });
    }).catch(function (e) {
      Object.keys(b.waiters).forEach(function (n) { b.waiters[n].forEach(function (w) { w[1](e); }); });
    });
  }

  // --- x by tokens, FLOPs or time: step -> x from the run's own counters -----------------------

  // A monotone step -> x table for `run`, over the whole run.
  function xmap(run, flopsPerToken) {
    var key = run + '\n' + view.x;
    if (xmaps[key]) { return xmaps[key]; }
    var p;
    if (view.x === 'tokens') {
      p = series(run, TOKENS, null, null, MAPPING_POINTS).then(fromPoints);
    } else if (view.x === 'flops') {
      // Training FLOPs are the tokens trained on times the spec's FLOPs per token (the cost
      // model's 6N + 12LdT, which is what the runner counts per step).
      p = series(run, TOKENS, null, null, MAPPING_POINTS).then(function (t) {
        var m = fromPoints(t);
        m.xs = m.xs.map(function (x) { return x * (flopsPerToken || NaN); });
        return m;
      });
    } else {
      // Training time: the sum of each interval's tokens over its tokens/s.
      p = Promise.all([series(run, TOKENS, null, null, MAPPING_POINTS),
        series(run, TPS, null, null, MAPPING_POINTS)]).then(function (r) {
        var tok = fromPoints(r[0]);
        var tps = fromPoints(r[1]);
        var steps = [0];
        var xs = [0];
        var t = 0;
        for (var i = 0; i < tps.steps.length; i++) {
          var s = tps.steps[i];
          var dtok = interp(tok, s) - interp(tok, steps[steps.length - 1]);
          if (tps.xs[i] > 0 && isFinite(dtok)) { t += dtok / tps.xs[i]; }
          steps.push(s);
          xs.push(t);
        }
        return { steps: steps, xs: xs };
      });
    }
    xmaps[key] = p;
    return p;
  }

  function fromPoints(s) {
    return {
      steps: s.points.map(function (p) { return p[0]; }),
      xs: s.points.map(function (p) { return p[1]; })
    };
  }

  function bisect(arr, v) {
    var lo = 0;
    var hi = arr.length;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (arr[mid] < v) { lo = mid + 1; } else { hi = mid; }
    }
    return lo;
  }

  // Linear interpolation of table m (keys `a`, values `b`) at v, clamped at the ends.
  function lerp(a, b, v) {
    if (!a.length) { return NaN; }
    var i = bisect(a, v);
    if (i <= 0) { return b[0]; }
    if (i >= a.length) { return b[a.length - 1]; }
    var a0 = a[i - 1];
    var a1 = a[i];
    return a1 === a0 ? b[i] : b[i - 1] + (b[i] - b[i - 1]) * (v - a0) / (a1 - a0);
  }
  function interp(m, step) { return lerp(m.steps, m.xs, step); }
  function invert(m, x) { return lerp(m.xs, m.steps, x); }

  // --- smoothing -----------------------------------------------------------------------------

  // TensorBoard's EMA with debiasing: s_i = w s_{i-1} + (1 - w) y_i, divided by 1 - w^n, so the
  // first points are not pulled towards 0. Gaps (null) are skipped, not smoothed through.
  function ema(ys, w) {
    var out = new Array(ys.length);
    var last = 0;
    var n = 0;
    for (var i = 0; i < ys.length; i++) {
      var y = ys[i];
      if (y === null || !isFinite(y)) { out[i] = null; continue; }
      last = last * w + (1 - w) * y;
      n++;
      out[i] = last / (1 - Math.pow(w, n));
    }
    return out;
  }

  // --- line charts ---------------------------------------------------------------------------

  function Chart(el) {
    this.el = el;
    this.lines = JSON.parse(el.dataset.series || '[]');
    // The run's notes and anomalies, by step: drawn over the lines after every redraw.
    this.marks = JSON.parse(el.dataset.marks || '[]');
    this.maps = {};
    this.title = el.dataset.title || '';
    this.unit = el.dataset.unit || '';
    this.raw = this.lines.map(function () { return { steps: [], ys: [] }; });
    this.plot = null;
    this.shape = '';
    this.seq = 0;
    this.holder = document.createElement('div');
    this.holder.className = 'uplot-holder';
  }

  Chart.prototype.width = function () {
    return Math.max(300, Math.floor(this.el.getBoundingClientRect().width || 700));
  };

  // Fetches every line over [from, to] at the chart's pixel width, then draws.
  Chart.prototype.load = function (from, to) {
    var self = this;
    var seq = ++this.seq;
    var maxPoints = Math.min(4000, Math.max(100, Math.round(this.width())));
    return Promise.all(this.lines.map(function (l) {
      if (l.points) { return Promise.resolve({ points: inRange(l.points, from, to) }); }
      return batched(l.run, l.name, from, to, maxPoints).catch(function () { return { points: [] }; });
    })).then(function (got) {
      if (seq !== self.seq) { return null; }
      var old = self.raw;
      self.raw = got.map(function (s) { return fromPoints(s); }).map(function (m, i) {
        var r = { steps: m.steps, ys: m.xs };
        // Live points that arrived while this was in flight, past what it returned.
        var o = old[i];
        if (to === null && o) {
          var last = r.steps.length ? r.steps[r.steps.length - 1] : -1;
          for (var k = 0; k < o.steps.length; k++) {
            if (o.steps[k] > last) { r.steps.push(o.steps[k]); r.ys.push(o.ys[k]); }
          }
        }
        return r;
      });
      return self.draw(true);
    });
  };

  // The [step, value] points of a line in the page within the step range.
  function inRange(points, from, to) {
    return points.filter(function (p) {
      return (from === null || p[0] >= from) && (to === null || p[0] <= to);
    });
  }

  // Whether a line is smoothed: fetched lines are, a handful of points in the page are not.
  function smoothed(l) { return view.smooth > 0 && !l.points; }

  // Aligned uPlot data from the raw lines: x by the chosen axis, raw and smoothed values.
  Chart.prototype.data = function () {
    var self = this;
    var runs = {};
    this.lines.forEach(function (l) { runs[l.run] = l.flops_per_token; });
    var maps = view.x === 'step' ? Promise.resolve({}) : Promise.all(Object.keys(runs).map(
      function (r) { return xmap(r, runs[r]).then(function (m) { return [r, m]; }); }
    )).then(function (pairs) {
      var o = {};
      pairs.forEach(function (p) { o[p[0]] = p[1]; });
      return o;
    });
    return maps.then(function (m) {
      var tables = self.raw.map(function (r, i) {
        var map = m[self.lines[i].run];
        var xs = map ? r.steps.map(function (s) { return interp(map, s); }) : r.steps.slice();
        var ys = r.ys.map(function (y) { return view.logy && !(y > 0) ? null : y; });
        // uPlot.join needs strictly increasing x per table.
        var kx = [];
        var ky = [];
        for (var k = 0; k < xs.length; k++) {
          if (!isFinite(xs[k]) || (kx.length && xs[k] <= kx[kx.length - 1])) { continue; }
          kx.push(xs[k]);
          ky.push(ys[k]);
        }
        return [kx, ky];
      });
      var joined = tables.length === 1 ? tables[0] : U.join(tables);
      if (!joined || !joined[0]) { joined = [[]].concat(tables.map(function () { return []; })); }
      var out = [joined[0]];
      for (var i = 1; i < joined.length; i++) {
        if (smoothed(self.lines[i - 1])) { out.push(joined[i]); out.push(ema(joined[i], view.smooth)); } else {
          out.push(joined[i]);
        }
      }
      return { data: out, maps: m };
    });
  };

  Chart.prototype.options = function () {
    var self = this;
    var s = [{ label: X_LABEL[view.x], value: function (u, v) { return v === null ? '–' : fmt(v); } }];
    this.lines.forEach(function (l, i) {
      var c = COLORS[i % COLORS.length];
      if (smoothed(l)) {
        s.push({ label: l.label + ' (raw)', stroke: c + '40', width: 1, spanGaps: true,
          value: function (u, v) { return fmt(v); } });
      }
      var line = { label: l.label, stroke: c, width: 1.5, spanGaps: true,
        value: function (u, v) { return fmt(v); } };
      if (l.markers) { line.points = { show: true, size: 7, fill: c }; }
      s.push(line);
    });
    return {
      title: this.title,
      width: this.width(),
      height: 260,
      series: s,
      scales: { x: { time: false }, y: { distr: view.logy ? 3 : 1 } },
      axes: [
        { label: X_LABEL[view.x], values: ticks },
        { label: this.unit + (view.logy ? ' (log)' : ''), size: axisSize, values: ticks }
      ],
      cursor: { sync: { key: 'glassbox' }, drag: { x: true, y: false, setScale: false } },
      legend: { live: true },
      hooks: {
        draw: [function (u) { self.drawMarks(u); }],
        setCursor: [function (u) { self.markTip(u); }],
        setSelect: [function (u) {
          if (u.select.width < 3) { return; }
          var a = u.posToVal(u.select.left, 'x');
          var b = u.posToVal(u.select.left + u.select.width, 'x');
          u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
          self.zoomX(a, b);
        }]
      }
    };
  };

  // Notes as translucent purple bands, anomalies as red lines, over the plotting area; a step
  // is placed on the chosen x axis as the lines are (tokens, FLOPs and time by the run's map).
  Chart.prototype.drawMarks = function (u) {
    if (!this.marks.length) { return; }
    var map = view.x === 'step' ? null : this.maps[this.lines[0] && this.lines[0].run];
    if (view.x !== 'step' && !map) { return; }
    var at = function (step) { return u.valToPos(map ? interp(map, step) : step, 'x', true); };
    var ctx = u.ctx;
    var top = u.bbox.top;
    var height = u.bbox.height;
    var left = u.bbox.left;
    var right = left + u.bbox.width;
    var drawn = 0;
    var hover = [];
    ctx.save();
    this.marks.forEach(function (m) {
      var a = at(m.from);
      var b = at(m.to);
      if (!isFinite(a) || !isFinite(b) || b < left || a > right) { return; }
      drawn++;
      // Where the cursor finds it, in CSS pixels of the plotting area.
      hover.push({ a: u.valToPos(map ? interp(map, m.from) : m.from, 'x'),
        b: u.valToPos(map ? interp(map, m.to) : m.to, 'x'), mark: m });
      a = Math.max(a, left);
      b = Math.min(b, right);
      if (m.anomaly || b - a < 2) {
        ctx.fillStyle = m.anomaly ? 'rgba(200, 30, 30, 0.85)' : 'rgba(120, 60, 170, 0.85)';
        ctx.fillRect(Math.round(a) - 1, top, 2, height);
      } else {
        ctx.fillStyle = 'rgba(120, 60, 170, 0.18)';
        ctx.fillRect(a, top, b - a, height);
      }
    });
    ctx.restore();
    this.hover = hover;
    // How many are in view, for a reader of the page's DOM (and the browser test).
    this.el.dataset.marksDrawn = String(drawn);
  };

  // The mark under the cursor (within a few pixels of a line, or inside a band) shows its kind
  // and message in a tip over the chart.
  Chart.prototype.markTip = function (u) {
    var x = u.cursor.left;
    var found = null;
    if (x != null && x >= 0 && this.hover) {
      // An anomaly (a thin line) wins over a note's band it falls in.
      this.hover.forEach(function (h) {
        if (x >= h.a - 4 && x <= h.b + 4 && (!found || (h.mark.anomaly && !found.mark.anomaly))) {
          found = h;
        }
      });
    }
    var tip = this.tip;
    if (!found) {
      if (tip) { tip.style.display = 'none'; }
      return;
    }
    if (!tip) {
      tip = this.tip = document.createElement('div');
      tip.className = 'mark-tip';
      u.over.appendChild(tip);
    }
    tip.textContent = found.mark.label;
    tip.classList.toggle('anomaly', !!found.mark.anomaly);
    tip.style.display = 'block';
    var width = u.over.clientWidth;
    tip.style.left = Math.max(0, Math.min(found.b + 8, width - 320)) + 'px';
  };

  // The step range of x range [a, b] on this chart's axis.
  Chart.prototype.zoomX = function (a, b) {
    var self = this;
    if (view.x === 'step') { zoomAll(Math.floor(a), Math.ceil(b)); return; }
    xmap(this.lines[0].run, this.lines[0].flops_per_token).then(function (m) {
      zoomAll(Math.floor(invert(m, a)), Math.ceil(invert(m, b)));
    });
    return self;
  };

  Chart.prototype.draw = function (reset) {
    var self = this;
    return this.data().then(function (d) {
      self.maps = d.maps || {};
      var shape = [view.smooth > 0, view.logy, view.x, self.lines.length].join();
      if (!self.plot || shape !== self.shape) {
        if (self.plot) { self.plot.destroy(); }
        self.shape = shape;
        self.plot = new U(self.options(), d.data, self.holder);
        self.plot.over.addEventListener('dblclick', function () { zoomAll(null, null); });
        if (!self.holder.parentNode) {
          self.el.classList.add('interactive');
          self.el.appendChild(self.holder);
        }
      } else {
        self.plot.setData(d.data, reset !== false);
      }
      return self;
    });
  };

  // Appends a live point to line (run, name); redrawn at most every animation frame.
  Chart.prototype.append = function (run, name, step, value) {
    var hit = false;
    for (var i = 0; i < this.lines.length; i++) {
      var l = this.lines[i];
      if (l.run !== run || l.name !== name) { continue; }
      var r = this.raw[i];
      if (!r.steps.length || step > r.steps[r.steps.length - 1]) {
        r.steps.push(step);
        r.ys.push(value === null ? null : value);
        hit = true;
      }
    }
    if (hit && !this.pending) {
      var self = this;
      this.pending = true;
      requestAnimationFrame(function () { self.pending = false; self.draw(false); });
    }
  };

  // --- charts whose points are in the page (the ladder's log-log fits) -----------------------

  // Drawn once; zoom is uPlot's own (drag sets the scales, double-click resets them), since
  // every point is already here.
  function PointsChart(el) {
    var lines = JSON.parse(el.dataset.points || '[]');
    var log = el.dataset.log === '1';
    var tables = lines.map(function (l) {
      var pts = l.points.filter(function (p) { return !log || (p[0] > 0 && p[1] > 0); })
        .sort(function (a, b) { return a[0] - b[0]; });
      var xs = [];
      var ys = [];
      pts.forEach(function (p) {
        if (!xs.length || p[0] > xs[xs.length - 1]) { xs.push(p[0]); ys.push(p[1]); }
      });
      return [xs, ys];
    });
    var data = tables.length === 1 ? tables[0] : U.join(tables);
    var series = [{ label: el.dataset.x || 'x', value: function (u, v) { return v === null ? '–' : fmt(v); } }];
    lines.forEach(function (l, i) {
      var c = COLORS[i % COLORS.length];
      series.push({ label: l.label, stroke: c, width: l.markers ? 0 : 1.5, spanGaps: true,
        points: { show: !!l.markers, size: 8, fill: c }, value: function (u, v) { return fmt(v); } });
    });
    var holder = document.createElement('div');
    holder.className = 'uplot-holder';
    this.el = el;
    this.lines = lines;
    this.plot = new U({
      title: el.dataset.title || '',
      width: Math.max(300, Math.floor(el.getBoundingClientRect().width || 700)),
      height: 300,
      series: series,
      scales: { x: { time: false, distr: log ? 3 : 1 }, y: { distr: log ? 3 : 1 } },
      axes: [{ label: el.dataset.x || 'x', values: ticks },
        { label: el.dataset.unit || '', size: axisSize, values: ticks }],
      cursor: { drag: { x: true, y: false, setScale: true } }
    }, data, holder);
    el.classList.add('interactive');
    el.appendChild(holder);
  }

  // --- heatmaps ------------------------------------------------------------------------------

  function Heatmap(el) {
    this.el = el;
    this.src = el.dataset.heatmap;
    this.seq = 0;
    this.tip = document.createElement('div');
    this.tip.className = 'hm-tip';
    this.tip.hidden = true;
    el.appendChild(this.tip);
    this.index();
    var self = this;
    el.addEventListener('mousemove', function (e) { self.hover(e); });
    el.addEventListener('mouseleave', function () { self.tip.hidden = true; });
  }

  // Hover targets of the current SVG: each circle.hp's centre and its title text.
  Heatmap.prototype.index = function () {
    this.svg = this.el.querySelector('svg');
    this.targets = Array.prototype.map.call(this.el.querySelectorAll('circle.hp'), function (c) {
      var t = c.querySelector('title');
      return [Number(c.getAttribute('cx')), Number(c.getAttribute('cy')), t ? t.textContent : ''];
    });
  };

  Heatmap.prototype.hover = function (e) {
    if (!this.svg || !this.targets.length || !this.svg.getScreenCTM) { return; }
    var p = this.svg.createSVGPoint();
    p.x = e.clientX;
    p.y = e.clientY;
    var m = this.svg.getScreenCTM();
    if (!m) { return; }
    var at = p.matrixTransform(m.inverse());
    var best = null;
    var bestD = Infinity;
    for (var i = 0; i < this.targets.length; i++) {
      var t = this.targets[i];
      var d = (t[0] - at.x) * (t[0] - at.x) + (t[1] - at.y) * (t[1] - at.y);
      if (d < bestD) { bestD = d; best = t; }
    }
    if (!best || bestD > 40 * 40) { this.tip.hidden = true; return; }
    this.tip.textContent = best[2];
    this.tip.hidden = false;
    var box = this.el.getBoundingClientRect();
    this.tip.style.left = (e.clientX - box.left + 12) + 'px';
    this.tip.style.top = (e.clientY - box.top + 12) + 'px';
  };

  Heatmap.prototype.load = function (from, to) {
    var self = this;
    var seq = ++this.seq;
    // The page's colour scale, shared by every layer, so a zoomed layer keeps it.
    var p = new URLSearchParams(this.el.dataset.scale || '');
    if (from !== null) { p.set('from', String(from)); }
    if (to !== null) { p.set('to', String(to)); }
    return fetch(this.src + (String(p) ? '?' + p : '')).then(function (r) {
      // A range without points answers 404 with a picture saying so.
      var svgType = (r.headers.get('content-type') || '').indexOf('image/svg+xml') === 0;
      return r.ok || svgType ? r.text() : null;
    }).then(function (svg) {
      if (svg === null || seq !== self.seq) { return; }
      var old = self.el.querySelector('svg');
      var box = document.createElement('div');
      box.innerHTML = svg;
      var fresh = box.querySelector('svg');
      if (old && fresh) { old.parentNode.replaceChild(fresh, old); }
      self.index();
    });
  };

  // --- the page's view -----------------------------------------------------------------------

  function writeUrl() {
    var p = new URLSearchParams(location.search);
    var set = function (k, v) { if (v === null || v === '' || v === false) { p.delete(k); } else { p.set(k, v); } };
    set('smooth', view.smooth > 0 ? String(view.smooth) : null);
    set('logy', view.logy ? '1' : null);
    set('x', view.x === 'step' ? null : view.x);
    set('from', view.from === null ? null : String(view.from));
    set('to', view.to === null ? null : String(view.to));
    var s = String(p);
    history.replaceState(null, '', location.pathname + (s ? '?' + s : '') + location.hash);
  }

  function zoomAll(from, to) {
    var t0 = performance.now();
    view.from = from;
    view.to = to;
    writeUrl();
    var all = charts.map(function (c) { return c.load(from, to); })
      .concat(heatmaps.map(function (h) { return h.load(from, to); }));
    return Promise.all(all).then(function () { zooms.push(performance.now() - t0); });
  }

  function redrawAll() {
    writeUrl();
    return Promise.all(charts.map(function (c) { return c.draw(true); }));
  }

  function controls() {
    var form = document.getElementById('chart-controls');
    if (!form) { return; }
    var smooth = form.elements.smooth;
    var logy = form.elements.logy;
    var x = form.elements.x;
    var out = form.querySelector('output');
    if (smooth) {
      smooth.value = String(view.smooth);
      smooth.addEventListener('input', function () {
        view.smooth = Math.min(0.999, Math.max(0, parseFloat(smooth.value) || 0));
        if (out) { out.textContent = view.smooth.toFixed(2); }
        redrawAll();
      });
    }
    if (logy) {
      logy.checked = view.logy;
      logy.addEventListener('change', function () { view.logy = logy.checked; redrawAll(); });
    }
    if (x) {
      x.value = view.x;
      x.addEventListener('change', function () { view.x = X_LABEL[x.value] ? x.value : 'step'; redrawAll(); });
    }
    var submit = form.querySelector('button[type=submit]');
    if (submit) { submit.hidden = true; }
  }

  // --- live runs: append each point in place -------------------------------------------------

  function follow(el) {
    if (!window.EventSource) { return; }
    var runs = JSON.parse(el.dataset.live || '[]');
    var note = document.getElementById('live-note');
    runs.forEach(function (run) {
      var es = new EventSource('/api/v1/runs/' + encodeURIComponent(run) + '/live');
      es.addEventListener('open', function () {
        if (note) { note.textContent = 'Connected: points are added as steps arrive.'; }
      });
      es.addEventListener('point', function (e) {
        var ev = JSON.parse(e.data);
        if (view.to === null) {
          charts.forEach(function (c) { c.append(ev.run, ev.name, ev.step, ev.value); });
        }
        var step = document.getElementById('last-step');
        if (step && (isNaN(Number(step.textContent)) || ev.step > Number(step.textContent))) {
          step.textContent = String(ev.step);
        }
        if (ev.name === TOKENS || ev.name === TPS) {
          Object.keys(xmaps).forEach(function (k) { if (k.indexOf(run + '\n') === 0) { delete xmaps[k]; } });
        }
      });
      es.addEventListener('status', function (e) {
        var ev = JSON.parse(e.data);
        var status = document.getElementById('run-status');
        if (status) { status.textContent = ev.status; }
      });
      es.addEventListener('error', function () {
        if (note) { note.textContent = 'Disconnected; reconnecting...'; }
      });
    });
  }

  function start() {
    controls();
    Array.prototype.forEach.call(document.querySelectorAll('figure.chart[data-series]'), function (el) {
      charts.push(new Chart(el));
    });
    Array.prototype.forEach.call(document.querySelectorAll('figure.chart[data-points]'), function (el) {
      try { new PointsChart(el); } catch (e) { /* the SVG stays */ }
    });
    Array.prototype.forEach.call(document.querySelectorAll('figure.heatmap[data-heatmap]'), function (el) {
      heatmaps.push(new Heatmap(el));
    });
    Promise.all(charts.map(function (c) { return c.load(view.from, view.to); })).then(function () {
      performance.mark('glassbox-charts-drawn');
      document.documentElement.setAttribute('data-charts', String(charts.length));
    });
    Array.prototype.forEach.call(document.querySelectorAll('[data-live]'), follow);
  }

  window.glassboxZoom = zoomAll;
  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
