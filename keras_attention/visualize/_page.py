"""The CSS and JavaScript inlined into every view (nothing is fetched).

The page reads its data from a `<script type="application/json">` block
and draws with SVG. Opened with `#selftest` after the file name, it also
exercises its own controls (head toggles, hover focus, click to enlarge)
and writes what it saw as JSON into `<pre id="selftest">`, which the
browser tests read from the rendered DOM.
"""

STYLE = """
body { font-family: sans-serif; margin: 1.2em; color: #222; }
h1 { font-size: 1.25em; margin: 0 0 0.4em 0; }
.note { color: #444; margin: 0.2em 0 0.8em 0; max-width: 60em; }
.controls { display: flex; flex-wrap: wrap; gap: 0.4em; align-items: center;
  margin-bottom: 0.6em; }
.head-toggle { border: 2px solid; border-radius: 0.3em; padding: 0.15em 0.6em;
  cursor: pointer; color: #fff; font-weight: bold; }
.head-toggle.off { background: #fff !important; color: #777; }
.legend { display: flex; align-items: center; gap: 0.4em; font-size: 0.85em; }
.legend .bar { width: 10em; height: 0.8em; border: 1px solid #999; }
.scroll { overflow: auto; max-height: 80vh; max-width: 100%;
  border: 1px solid #ddd; }
svg text { font-size: 13px; cursor: default; }
svg text.token:hover { font-weight: bold; }
line.attn { stroke-linecap: round; }
line.attn.off { display: none; }
svg.focusing line.attn:not(.on) { stroke-opacity: 0.02; }
.grid { border-collapse: collapse; }
.grid td, .grid th { padding: 2px; font-size: 0.8em; font-weight: normal; }
.grid svg.thumb { border: 1px solid #ccc; cursor: zoom-in; background: #fff; }
.grid svg.thumb:hover { border-color: #333; }
.overlay { position: fixed; inset: 0; background: rgba(0,0,0,0.45);
  display: none; align-items: flex-start; justify-content: center;
  padding-top: 3vh; }
.overlay.open { display: flex; }
.overlay .panel { background: #fff; padding: 0.8em; border-radius: 0.4em;
  max-height: 90vh; overflow: auto; }
.overlay .close { float: right; cursor: pointer; border: none;
  background: none; font-size: 1.4em; }
.sentence { margin-bottom: 1.4em; }
.sentence h2 { font-size: 1em; margin: 0.2em 0; }
.heatmap { border-collapse: collapse; font-size: 0.8em; }
.heatmap td { width: 1.8em; height: 1.4em; border: 1px solid #eee; }
.heatmap th { font-weight: normal; padding: 0 0.3em; white-space: nowrap; }
.heatmap thead th { writing-mode: vertical-rl; transform: rotate(180deg);
  text-align: left; }
.heatmap td.on, .heatmap th.on { outline: 2px solid #d62728; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("attention-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  var ROW = 20;

  function colour(head) { return COLOURS[head % COLOURS.length]; }

  function svgNode(tag, attrs, parent) {
    var node = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (k) {
      node.setAttribute(k, attrs[k]);
    });
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function htmlNode(tag, className, parent, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined) { node.textContent = text; }
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function opacity(weight) {
    return Math.max(0.05, Math.min(1, weight / data.peak)).toFixed(3);
  }

  // Lines from each query (left) to each key (right) above the threshold,
  // one colour per head; token labels on both sides when `labels`.
  function drawLines(svg, matrices, heads, queries, keys, o) {
    var rows = Math.max(queries.length, keys.length);
    var left = o.labels ? o.labelWidth : 3;
    var right = o.width - left;
    var row = o.labels ? ROW : o.row;
    var y = function (i) { return 4 + row * (i + 0.5); };
    svg.setAttribute("width", o.width);
    svg.setAttribute("height", 8 + row * rows);
    if (o.labels) {
      queries.forEach(function (t, i) {
        var n = svgNode("text", {x: left - 8, y: y(i) + 4,
          "text-anchor": "end", "class": "token query", "data-index": i}, svg);
        n.textContent = t;
      });
      keys.forEach(function (t, j) {
        var n = svgNode("text", {x: right + 8, y: y(j) + 4,
          "class": "token key", "data-index": j}, svg);
        n.textContent = t;
      });
    }
    heads.forEach(function (h) {
      matrices[h].forEach(function (weights, i) {
        weights.forEach(function (w, j) {
          if (w > data.threshold) {
            svgNode("line", {x1: left, y1: y(i), x2: right, y2: y(j),
              stroke: colour(h), "stroke-opacity": opacity(w),
              "stroke-width": o.labels ? 2.5 : 1, "class": "attn",
              "data-head": h, "data-query": i, "data-key": j}, svg);
          }
        });
      });
    });
  }

  function labelWidth(tokens) {
    var longest = tokens.reduce(function (m, t) {
      return Math.max(m, String(t).length); }, 1);
    return Math.min(260, 16 + 7.5 * longest);
  }

  function focusOnHover(svg) {
    svg.querySelectorAll("text.token").forEach(function (t) {
      var side = t.classList.contains("query") ? "query" : "key";
      t.addEventListener("mouseenter", function () {
        svg.classList.add("focusing");
        svg.querySelectorAll("line.attn[data-" + side + '="' +
          t.getAttribute("data-index") + '"]').forEach(function (l) {
          l.classList.add("on"); });
      });
      t.addEventListener("mouseleave", function () {
        svg.classList.remove("focusing");
        svg.querySelectorAll("line.attn.on").forEach(function (l) {
          l.classList.remove("on"); });
      });
    });
  }

  function bigDrawing(parent, layer, heads) {
    var keys = data.tokens;
    var width = 2 * labelWidth(keys.concat(layer.queries)) + 260;
    var svg = svgNode("svg", {"class": "lines"}, parent);
    drawLines(svg, layer.heads, heads, layer.queries, keys,
      {labels: true, width: width,
       labelWidth: labelWidth(keys.concat(layer.queries))});
    focusOnHover(svg);
    return svg;
  }

  function headView(root) {
    var controls = htmlNode("div", "controls", root);
    var state = {layer: 0, off: {}};
    if (data.layers.length > 1) {
      htmlNode("label", null, controls, "Layer:");
      var select = htmlNode("select", null, controls);
      select.id = "layer-select";
      data.layers.forEach(function (layer, i) {
        var option = htmlNode("option", null, select, layer.name);
        option.value = i;
      });
      select.addEventListener("change", function () {
        state.layer = Number(select.value); render(); });
    }
    htmlNode("span", null, controls, data.head_label + ":");
    var count = data.layers.reduce(function (m, l) {
      return Math.max(m, l.heads.length); }, 0);
    for (var h = 0; h < count; h++) {
      (function (head) {
        var button = htmlNode("button", "head-toggle", controls,
          data.head_names[head]);
        button.style.background = colour(head);
        button.style.borderColor = colour(head);
        button.setAttribute("data-head", head);
        button.setAttribute("aria-pressed", "true");
        button.addEventListener("click", function () {
          state.off[head] = !state.off[head];
          button.classList.toggle("off", state.off[head]);
          button.setAttribute("aria-pressed", String(!state.off[head]));
          applyToggles();
        });
      })(h);
    }
    legend(controls);
    var scroll = htmlNode("div", "scroll", root);
    function applyToggles() {
      scroll.querySelectorAll("line.attn").forEach(function (l) {
        l.classList.toggle("off", !!state.off[l.getAttribute("data-head")]);
      });
    }
    function render() {
      scroll.textContent = "";
      var layer = data.layers[state.layer];
      bigDrawing(scroll, layer, layer.heads.map(function (_, i) { return i; }));
      applyToggles();
    }
    render();
  }

  function modelView(root) {
    var controls = htmlNode("div", "controls", root);
    htmlNode("span", null, controls,
      "Rows: layers; columns: " + data.head_label.toLowerCase() +
      ". Click a cell to enlarge it.");
    legend(controls);
    var scroll = htmlNode("div", "scroll", root);
    var table = htmlNode("table", "grid", scroll);
    var overlay = htmlNode("div", "overlay", document.body);
    overlay.id = "enlarged";
    var panel = htmlNode("div", "panel", overlay);
    overlay.addEventListener("click", function (e) {
      if (e.target === overlay) { overlay.classList.remove("open"); }
    });
    var count = data.layers.reduce(function (m, l) {
      return Math.max(m, l.heads.length); }, 0);
    var head = htmlNode("tr", null, htmlNode("thead", null, table));
    htmlNode("th", null, head, "");
    for (var h = 0; h < count; h++) {
      htmlNode("th", null, head, data.head_names[h]);
    }
    var body = htmlNode("tbody", null, table);
    data.layers.forEach(function (layer, li) {
      var tr = htmlNode("tr", null, body);
      htmlNode("th", null, tr, layer.name);
      layer.heads.forEach(function (_, hi) {
        var svg = svgNode("svg", {"class": "thumb", "data-layer": li,
          "data-head": hi}, htmlNode("td", null, tr));
        var rows = Math.max(layer.queries.length, data.tokens.length);
        drawLines(svg, layer.heads, [hi], layer.queries, data.tokens,
          {labels: false, width: 90, row: Math.max(1, Math.min(6, 96 / rows))});
        svg.addEventListener("click", function () { enlarge(li, hi); });
      });
    });
    function enlarge(li, hi) {
      panel.textContent = "";
      var close = htmlNode("button", "close", panel, "\u00d7");
      close.title = "close";
      close.addEventListener("click", function () {
        overlay.classList.remove("open"); });
      htmlNode("h2", null, panel,
        data.layers[li].name + ", " + data.head_names[hi]);
      bigDrawing(panel, data.layers[li], [hi]);
      overlay.classList.add("open");
    }
  }

  function alignmentView(root) {
    var controls = htmlNode("div", "controls", root);
    legend(controls);
    data.sentences.forEach(function (s) {
      var box = htmlNode("div", "sentence", root);
      if (s.title) { htmlNode("h2", null, box, s.title); }
      var scroll = htmlNode("div", "scroll", box);
      var width = 2 * labelWidth(s.targets.concat(s.sources)) + 200;
      var svg = svgNode("svg", {"class": "lines"}, scroll);
      drawLines(svg, [s.weights], [0], s.targets, s.sources,
        {labels: true, width: width,
         labelWidth: labelWidth(s.targets.concat(s.sources))});
      focusOnHover(svg);
      heatmap(scroll, s);
    });
  }

  function heatmap(parent, s) {
    var table = htmlNode("table", "heatmap", parent);
    var head = htmlNode("tr", null, htmlNode("thead", null, table));
    htmlNode("th", null, head, "");
    s.sources.forEach(function (t) { htmlNode("th", null, head, t); });
    var body = htmlNode("tbody", null, table);
    s.weights.forEach(function (row, i) {
      var tr = htmlNode("tr", null, body);
      htmlNode("th", null, tr, s.targets[i]);
      row.forEach(function (w, j) {
        var td = htmlNode("td", null, tr);
        td.style.background =
          "rgba(31, 119, 180, " + (w / data.peak).toFixed(3) + ")";
        td.title =
          s.targets[i] + " \u2192 " + s.sources[j] + ": " + w.toFixed(4);
        td.addEventListener("mouseenter", function () {
          td.classList.add("on");
          head.children[j + 1].classList.add("on");
          tr.firstChild.classList.add("on");
        });
        td.addEventListener("mouseleave", function () {
          parent.querySelectorAll(".on").forEach(function (n) {
            n.classList.remove("on"); });
        });
      });
    });
  }

  function legend(parent) {
    var box = htmlNode("span", "legend", parent);
    htmlNode("span", null, box, "attention weight: 0");
    var bar = htmlNode("span", "bar", box);
    var rgb = data.kind === "alignment" ? "31, 119, 180" : "40, 40, 40";
    bar.style.background = "linear-gradient(to right, rgba(" + rgb +
      ", 0.05), rgba(" + rgb + ", 1))";
    htmlNode("span", null, box, data.peak.toFixed(3) +
      (data.kind === "alignment" ? " (line opacity and cell colour;" :
      " (line opacity; colour = head;") + " lines drawn above " +
      data.threshold + ")");
  }

  function hover(node, on) {
    node.dispatchEvent(new MouseEvent(on ? "mouseenter" : "mouseleave"));
  }

  function selfTest() {
    var report = {lines: document.querySelectorAll("line.attn").length,
      tokens: Array.prototype.map.call(
        document.querySelectorAll("text.token"),
        function (t) { return t.textContent; })};
    var toggle = document.querySelector("button.head-toggle");
    if (toggle) {
      toggle.click();
      report.hidden_after_toggle =
        document.querySelectorAll("line.attn.off").length;
      toggle.click();
      report.hidden_after_second_toggle =
        document.querySelectorAll("line.attn.off").length;
    }
    var query = document.querySelector("svg.lines text.token.query");
    if (query) {
      hover(query, true);
      report.focused = document.querySelectorAll("line.attn.on").length;
      hover(query, false);
      report.focused_after_leave =
        document.querySelectorAll("line.attn.on").length;
    }
    var thumb = document.querySelector("svg.thumb");
    if (thumb) {
      thumb.dispatchEvent(new MouseEvent("click", {bubbles: true}));
      var open = document.querySelector(".overlay.open");
      report.enlarged_lines = open ?
        open.querySelectorAll("line.attn").length : null;
      report.enlarged_tokens = open ?
        open.querySelectorAll("text.token").length : null;
    }
    report.cells = document.querySelectorAll(".heatmap td").length;
    var out = htmlNode("pre", null, document.body, JSON.stringify(report));
    out.id = "selftest";
  }

  var root = document.getElementById("view");
  var views = {head: headView, model: modelView, alignment: alignmentView};
  views[data.kind](root);
  if (window.location.hash === "#selftest") { selfTest(); }
})();
"""
