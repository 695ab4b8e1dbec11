// The page's own style and script, inlined into every report.html (no file, font or image
// is fetched). The script reads the JSON blob (#kiln-data) and draws: line charts with
// Chart.js (when inlined), the expert-load heat maps with plain canvas (Chart.js has no heat
// map), and the attribution bars.
#include "kiln/report/report_internal.h"

namespace kiln::report::internal {

const char* const kReportCss = R"css(
*{box-sizing:border-box}
body{margin:0;background:#f3f4f6;color:#1f2328;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans","Liberation Sans",sans-serif}
header{background:#1f2933;color:#f3f4f6;padding:12px 28px}
header .bar{display:flex;align-items:baseline;gap:28px;flex-wrap:wrap}
header h1{font-size:19px;margin:0;font-weight:650;letter-spacing:.2px}
header h1 span{font-weight:400;color:#aab4c0}
header nav a{color:#cdd5df;text-decoration:none;margin-right:14px;font-size:13px}
header nav a:hover{color:#fff;text-decoration:underline}
header .sub{margin:4px 0 0;color:#aab4c0;font-size:13px}
header .live{display:inline-block;background:#2ea043;color:#fff;border-radius:10px;padding:0 8px;margin-left:6px;font-size:12px}
main{max-width:1560px;margin:0 auto;padding:16px 28px 40px}
section{background:#fff;border:1px solid #dfe3e8;border-radius:8px;padding:14px 18px 16px;margin:0 0 16px}
h2{font-size:16px;margin:0 0 10px;font-weight:650}
h3{font-size:13.5px;margin:0 0 2px;font-weight:600}
.caption,.hint{color:#57606a;font-size:12.5px;margin:6px 0 0}
.hint{margin:0 0 6px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:14px}
.heat{display:grid;grid-template-columns:2fr 1fr;gap:14px;margin-bottom:12px}
@media (max-width:1000px){.heat,.pair{grid-template-columns:1fr}}
.pair{display:grid;grid-template-columns:minmax(0,auto) minmax(0,1fr);gap:16px;align-items:start}
.pair>section{margin:0 0 16px;overflow-x:auto}
.tiles{display:flex;flex-wrap:wrap;gap:10px;margin:0 0 12px;align-items:stretch}
.tile{background:#f6f8fa;border:1px solid #e6e9ed;border-radius:6px;padding:8px 14px;min-width:130px}
.tile .v{font-size:21px;font-weight:600;font-variant-numeric:tabular-nums;line-height:1.25}
.tile .k{font-size:12px;color:#57606a}
.tile-run{display:flex;align-items:center;font-weight:600;min-width:110px}
details summary{cursor:pointer;color:#0969da;margin:8px 0 4px;font-size:13px}
.card{border:1px solid #e6e9ed;border-radius:6px;padding:10px 12px 8px;min-width:0}
.chart-box{position:relative;height:280px;width:100%}
.chart-box .overlay{position:absolute;inset:0;display:flex;align-items:center;justify-content:center;color:#8c959f;font-style:italic;pointer-events:none}
.heat canvas{display:block;width:100%}
.readout{font-size:12px;color:#57606a;min-height:18px;margin-top:2px;font-variant-numeric:tabular-nums}
table.grid{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:13px}
table.grid th,table.grid td{padding:4px 12px;border-bottom:1px solid #eceff2;vertical-align:baseline}
.side{display:flex;flex-wrap:wrap;gap:16px 28px;align-items:flex-start}
.side>.grow{flex:1 1 560px;min-width:0}
.side>table{flex:0 0 auto}
table.grid td{text-align:right;white-space:nowrap}
table.grid td.text,table.grid td.source{text-align:left;white-space:normal;word-break:break-word}
table.grid td.source{color:#6e7781;font-size:12px}
table.grid thead th{background:#f6f8fa;text-align:left;font-weight:600;border-bottom:1px solid #d8dee4;position:sticky;top:0}
table.grid tbody th{text-align:left;font-weight:500;color:#424a53;white-space:nowrap}
table.grid tr.total td,table.grid tr.total th{font-weight:650;border-top:1px solid #d0d7de}
table.grid tr.differs th,table.grid tr.differs td{background:#fff8c5}
#summary td,#summary-setup td{font-size:14px;text-align:left}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:baseline}
.missing{color:#8c959f;font-style:italic}
.muted{color:#6e7781;font-size:12px}
.scroll{max-height:440px;overflow:auto;border:1px solid #eceff2;border-radius:4px}
#notes{background:#fff8e6;border-color:#f0d8a8}
#notes ul,ul.plain{margin:0;padding-left:18px}
ul.plain{list-style:none;padding:0}
ul.plain li{margin:2px 0}
pre{background:#f6f8fa;border:1px solid #eceff2;border-radius:4px;padding:10px;overflow:auto;font:12px/1.4 ui-monospace,"DejaVu Sans Mono",monospace}
code{font:12.5px ui-monospace,"DejaVu Sans Mono",monospace;background:#f0f2f4;padding:0 4px;border-radius:3px}
footer{color:#57606a;font-size:12.5px}
footer li{margin:2px 0}
)css";

const char* const kReportJs = R"js(
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('kiln-data').textContent);
  var runs = data.runs;
  var hasChart = typeof window.Chart === 'function';

  // A live page reloads itself (meta refresh): keep the reader where they were.
  if (data.live) {
    try {
      var key = 'kiln-report-scroll:' + location.pathname;
      history.scrollRestoration = 'manual';
      window.addEventListener('pagehide', function () { sessionStorage.setItem(key, String(window.scrollY)); });
      var y = Number(sessionStorage.getItem(key) || 0);
      if (y > 0) window.addEventListener('load', function () { window.scrollTo(0, y); });
    } catch (e) { /* no storage for this page: the browser's own restoring applies */ }
  }

  function fmt(v) {
    if (v === null || v === undefined || isNaN(v)) return 'n/a';
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3);
    return String(Number(v.toPrecision(5)));
  }
  function points(x, y, scale) {
    var out = new Array(x.length);
    for (var i = 0; i < x.length; i++) {
      var v = y[i];
      out[i] = {x: x[i], y: (v === null || v === undefined) ? NaN : v * scale};
    }
    return out;
  }
  function line(label, color, pts, extra) {
    var ds = {label: label, data: pts, borderColor: color, backgroundColor: color, borderWidth: 1.8,
              pointRadius: pts.length <= 40 ? 2.5 : 0, pointHoverRadius: 4, tension: 0, spanGaps: false};
    for (var k in extra || {}) ds[k] = extra[k];
    return ds;
  }
  function series(run, field, scale, label, extra) {
    if (!run.s[field]) return null;
    return line(label, run.color, points(run.x, run.s[field], scale || 1), extra);
  }
  function overlay(canvas, text) {
    var div = document.createElement('div');
    div.className = 'overlay';
    div.textContent = text;
    canvas.parentElement.appendChild(div);
  }

  var charts = [];
  function lineChart(id, datasets, yLabel, more) {
    var canvas = document.getElementById(id);
    if (!canvas) return;
    datasets = datasets.filter(function (d) { return d; });
    var n = 0;
    datasets.forEach(function (d) { n += d.data.length; });
    if (n === 0) overlay(canvas, runs.length ? 'no steps yet' : 'no runs');
    else if (!hasChart) overlay(canvas, 'this chart needs Chart.js (Debian: libjs-chart.js)');
    if (!hasChart) return;
    var scales = {
      x: {type: 'linear', title: {display: true, text: 'step'}, ticks: {precision: 0, maxTicksLimit: 10}},
      y: {title: {display: true, text: yLabel}, ticks: {maxTicksLimit: 8}}
    };
    for (var k in (more && more.scales) || {}) scales[k] = more.scales[k];
    charts.push(new Chart(canvas, {
      type: 'line',
      data: {datasets: datasets},
      options: {
        animation: false, parsing: false, normalized: true, responsive: true, maintainAspectRatio: false,
        interaction: {mode: 'nearest', axis: 'x', intersect: false},
        scales: scales,
        plugins: {
          legend: {position: 'bottom', labels: {boxWidth: 14, boxHeight: 2, padding: 10}},
          decimation: {enabled: true, algorithm: 'lttb', samples: 1000},
          tooltip: {callbacks: {
            title: function (items) { return items.length ? 'step ' + items[0].parsed.x : ''; },
            label: function (item) { return item.dataset.label + ': ' + fmt(item.parsed.y); }
          }}
        }
      }
    }));
  }

  var dashed = {borderDash: [6, 4], borderWidth: 1.4};
  var dotted = {borderDash: [2, 3], borderWidth: 1.4};
  function differs(run, a, b) {
    var x = run.s[a], y = run.s[b];
    if (!x || !y) return false;
    for (var i = 0; i < x.length; i++) if (x[i] !== y[i]) return true;
    return false;
  }

  var lossSets = [];
  runs.forEach(function (r) {
    lossSets.push(series(r, 'loss', 1, r.name));
    if (differs(r, 'loss', 'lm_loss')) lossSets.push(series(r, 'lm_loss', 1, r.name + ' · lm_loss', dashed));
    if (r.eval.x.length) {
      lossSets.push(line(r.name + ' · eval', r.color, points(r.eval.x, r.eval.y, 1),
                         {borderDash: [3, 3], borderWidth: 1.4, pointRadius: 4, pointStyle: 'rectRot',
                          pointBackgroundColor: '#fff'}));
    }
  });
  lineChart('chart-loss', lossSets, 'loss');
  lineChart('chart-lr', runs.map(function (r) { return series(r, 'learning_rate', 1, r.name); }), 'learning rate');
  var normSets = [];
  runs.forEach(function (r) {
    normSets.push(series(r, 'grad_norm', 1, r.name + ' · grad (clipped)'));
    normSets.push(series(r, 'raw_grad_norm', 1, r.name + ' · raw grad', dashed));
    normSets.push(series(r, 'param_norm', 1, r.name + ' · param (right axis)', Object.assign({yAxisID: 'y1'}, dotted)));
  });
  lineChart('chart-norms', normSets, 'gradient norm',
            {scales: {y1: {position: 'right', title: {display: true, text: 'parameter norm'},
                           grid: {drawOnChartArea: false}, ticks: {maxTicksLimit: 8}}}});
  var timeSets = [];
  runs.forEach(function (r) {
    timeSets.push(series(r, 'step_time_s', 1, r.name));
    timeSets.push(series(r, 'data_wait_s', 1, r.name + ' · data wait', dashed));
    timeSets.push(series(r, 'collective_wait_s', 1, r.name + ' · collective wait', dotted));
  });
  lineChart('chart-step-time', timeSets, 'seconds', {scales: {y: {beginAtZero: true, title: {display: true, text: 'seconds'}}}});
  lineChart('chart-tokens', runs.map(function (r) { return series(r, 'tokens_per_s_per_device', 1, r.name); }),
            'tokens/s/device', {scales: {y: {beginAtZero: true, title: {display: true, text: 'tokens/s/device'}}}});
  lineChart('chart-mfu', runs.map(function (r) { return series(r, 'mfu', 100, r.name); }), 'MFU (%)',
            {scales: {y: {beginAtZero: true, title: {display: true, text: 'MFU (% of peak)'}}}});

  // Where the step time went: horizontal bars, one per category and run, labelled with the
  // share and the achieved rate.
  (function () {
    var canvas = document.getElementById('chart-attribution');
    if (!canvas || !hasChart) return;
    var withRows = runs.filter(function (r) { return r.attr && r.attr.rows.length; });
    var labels = [];
    withRows.forEach(function (r) {
      r.attr.rows.forEach(function (row) { if (labels.indexOf(row.name) < 0) labels.push(row.name); });
    });
    var datasets = withRows.map(function (r) {
      var rowOf = {};
      r.attr.rows.forEach(function (row) { rowOf[row.name] = row; });
      return {
        label: r.name, backgroundColor: r.color + 'cc', borderColor: r.color, borderWidth: 1,
        data: labels.map(function (n) { return rowOf[n] ? rowOf[n].seconds : null; }),
        notes: labels.map(function (n) {
          var row = rowOf[n];
          if (!row) return '';
          var pct = (row.percent === null ? '' : row.percent.toFixed(1) + '%');
          return row.rate && row.rate !== '-' ? pct + '  ·  ' + row.rate : pct;
        })
      };
    });
    var rateLabels = {
      id: 'kilnRates',
      afterDatasetsDraw: function (chart) {
        var ctx = chart.ctx;
        ctx.save();
        ctx.font = '11px system-ui, sans-serif';
        ctx.textBaseline = 'middle';
        chart.data.datasets.forEach(function (ds, i) {
          var meta = chart.getDatasetMeta(i);
          if (meta.hidden) return;
          meta.data.forEach(function (bar, j) {
            var text = ds.notes[j];
            if (!text) return;
            var w = ctx.measureText(text).width;
            if (bar.x + 6 + w > chart.chartArea.right && bar.x - bar.base > w + 12) {
              ctx.fillStyle = '#fff';  // no room to the right: inside the bar's end
              ctx.textAlign = 'right';
              ctx.fillText(text, bar.x - 6, bar.y);
            } else {
              ctx.fillStyle = '#424a53';
              ctx.textAlign = 'left';
              ctx.fillText(text, bar.x + 6, bar.y);
            }
          });
        });
        ctx.restore();
      }
    };
    charts.push(new Chart(canvas, {
      type: 'bar',
      data: {labels: labels, datasets: datasets},
      plugins: [rateLabels],
      options: {
        indexAxis: 'y', animation: false, responsive: true, maintainAspectRatio: false,
        scales: {x: {beginAtZero: true, grace: '30%', title: {display: true, text: 'seconds per step'}},
                 y: {ticks: {autoSkip: false}}},
        plugins: {
          legend: {display: withRows.length > 1, position: 'bottom'},
          tooltip: {callbacks: {label: function (item) {
            return item.dataset.label + ': ' + fmt(item.parsed.x) + ' s/step  ' + item.dataset.notes[item.dataIndex];
          }}}
        }
      }
    }));
  })();

  // Expert load heat maps (plain canvas): layers down, logged steps across.
  var viridis = ['#440154', '#414487', '#2a788e', '#22a884', '#7ad151', '#fde725'];
  var reds = ['#fff5f0', '#fcbba1', '#fb6a4a', '#cb181d', '#67000d'];
  function hex(c) { return [parseInt(c.substr(1, 2), 16), parseInt(c.substr(3, 2), 16), parseInt(c.substr(5, 2), 16)]; }
  function colormap(stops, t) {
    t = Math.max(0, Math.min(1, t)) * (stops.length - 1);
    var i = Math.min(Math.floor(t), stops.length - 2), f = t - i, a = hex(stops[i]), b = hex(stops[i + 1]);
    return 'rgb(' + [0, 1, 2].map(function (k) { return Math.round(a[k] + (b[k] - a[k]) * f); }).join(',') + ')';
  }
  var heatmaps = [];
  function heatmap(canvas, run, kind) {
    var el = run.el, L = el.layers, C = el.x.length, vals = [], hi = -Infinity;
    for (var c = 0; c < C; c++) {
      var col = [];
      for (var l = 0; l < L; l++) {
        var mx = el.max[c][l], mean = el.mean[c][l], d = el.dropped[c][l];
        var v = kind === 'imbalance' ? (mx !== null && mean ? mx / mean : null) : d;
        if (v !== null && isFinite(v)) hi = Math.max(hi, v); else v = null;
        col.push(v);
      }
      vals.push(col);
    }
    var lo = kind === 'imbalance' ? 1 : 0;
    var top = kind === 'imbalance' ? Math.max(hi, 1.25) : Math.max(hi, 1);
    var stops = kind === 'imbalance' ? viridis : reds;
    var none = kind === 'dropped' && !(hi > 0);
    var readout = canvas.parentElement.querySelector('.readout');
    var idle = kind === 'imbalance'
        ? 'max / mean (token, expert) pairs per expert; 1 = perfectly balanced. Hover for values.'
        : (none ? 'no (token, expert) pair was dropped in any logged step' : 'pairs dropped by the capacity limit. Hover for values.');
    readout.textContent = idle;
    var geom = null;
    function draw() {
      var W = Math.max(canvas.parentElement.clientWidth, 200);
      var left = 52, right = 84, topPad = 6, bottom = 36;
      var rowH = Math.max(5, Math.min(26, Math.floor(220 / Math.max(L, 1))));
      var H = topPad + rowH * L + bottom, dpr = window.devicePixelRatio || 1;
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
      canvas.style.height = H + 'px';
      var ctx = canvas.getContext('2d');
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, W, H);
      var pw = W - left - right, cw = pw / Math.max(C, 1);
      for (var c = 0; c < C; c++) {
        var x0 = Math.floor(left + c * cw), x1 = Math.max(Math.floor(left + (c + 1) * cw) - (cw > 6 ? 1 : 0), x0 + 1);
        for (var l = 0; l < L; l++) {
          var v = vals[c][l];
          ctx.fillStyle = v === null ? '#e5e7eb' : none ? '#f3f4f6' : colormap(stops, (v - lo) / (top - lo));
          ctx.fillRect(x0, topPad + l * rowH, x1 - x0, rowH - (rowH > 8 ? 1 : 0));
        }
      }
      ctx.fillStyle = '#424a53';
      ctx.font = '11px system-ui, sans-serif';
      ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
      var every = Math.ceil(12 / rowH);
      for (var l2 = 0; l2 < L; l2 += every) ctx.fillText(String(l2), left - 6, topPad + (l2 + 0.5) * rowH);
      ctx.save();
      ctx.translate(12, topPad + rowH * L / 2); ctx.rotate(-Math.PI / 2);
      ctx.textAlign = 'center'; ctx.fillText('layer', 0, 0);
      ctx.restore();
      ctx.textAlign = 'center'; ctx.textBaseline = 'top';
      var ticks = Math.min(C, Math.max(2, Math.floor(pw / 90)));
      var last = -1;
      for (var t = 0; t < ticks; t++) {
        var ci = ticks === 1 ? 0 : Math.round(t * (C - 1) / (ticks - 1));
        if (ci === last) continue;
        last = ci;
        ctx.fillText(String(el.x[ci]), left + (ci + 0.5) * cw, topPad + rowH * L + 4);
      }
      ctx.fillText(el.bucket > 1 ? 'step (each column ' + el.bucket + ' logged steps)' : 'step (logged every log_period)',
                   left + pw / 2, topPad + rowH * L + 19);
      // Colour bar.
      var bx = W - right + 14, bh = rowH * L;
      for (var p = 0; p < bh; p++) {
        ctx.fillStyle = none ? '#f3f4f6' : colormap(stops, 1 - p / Math.max(bh - 1, 1));
        ctx.fillRect(bx, topPad + p, 12, 1);
      }
      ctx.fillStyle = '#424a53'; ctx.textAlign = 'left'; ctx.textBaseline = 'middle';
      var unit = kind === 'imbalance' ? '×' : '';
      ctx.fillText(Number(top.toPrecision(3)) + unit, bx + 16, topPad + 5);
      ctx.fillText(lo + unit, bx + 16, topPad + bh - 5);
      geom = {left: left, top: topPad, cw: cw, rowH: rowH};
    }
    canvas.addEventListener('mousemove', function (ev) {
      if (!geom) return;
      var rect = canvas.getBoundingClientRect();
      var c = Math.floor((ev.clientX - rect.left - geom.left) / geom.cw);
      var l = Math.floor((ev.clientY - rect.top - geom.top) / geom.rowH);
      if (c < 0 || c >= C || l < 0 || l >= L) { readout.textContent = idle; return; }
      var mx = el.max[c][l], mean = el.mean[c][l];
      readout.textContent = run.name + ' · step ' + el.x[c] + ' · layer ' + l + ': max ' + fmt(mx) + ', mean ' + fmt(mean) +
          (mx !== null && mean ? ' (' + (mx / mean).toFixed(2) + '×)' : '') + ', dropped ' + fmt(el.dropped[c][l]);
    });
    canvas.addEventListener('mouseleave', function () { readout.textContent = idle; });
    canvas.setAttribute('data-cells', String(C * L));
    canvas.setAttribute('data-layers', String(L));
    canvas.setAttribute('data-columns', String(C));
    heatmaps.push(draw);
    draw();
  }
  runs.forEach(function (r, i) {
    if (!r.el) return;
    ['imbalance', 'dropped'].forEach(function (kind) {
      var canvas = document.getElementById('heatmap-' + kind + '-' + i);
      if (canvas) heatmap(canvas, r, kind);
    });
  });
  var pending = 0;
  window.addEventListener('resize', function () {
    clearTimeout(pending);
    pending = setTimeout(function () { heatmaps.forEach(function (d) { d(); }); }, 100);
  });
  document.body.setAttribute('data-rendered', hasChart ? 'charts' : 'tables');
})();
)js";

}  // namespace kiln::report::internal
