// The Lab view: the seeds' hand exercise on a logits vector you type. Every number comes from the
// server (POST /v1/lab runs tokenstep.sampling.lab.exercise, the sampler's own code); this file only
// draws the table and the summary lines.

import { postJSON } from "./api.js";
import { element, readControls, renderControls } from "./controls.js";
import { clearError, showError } from "./page.js";
import { formatProb } from "./stream.js";

const SEEDS = { logits: "4, 3, 2, 1, 0.5", labels: "the, a, an, and, or", temperature: 1, top_k: 3, top_p: 0.9, min_p: 0 };
const HAND_DECIMALS = 3; // the seeds round probabilities to three places before doing sums by hand
const LAB_FIELDS = [
  { name: "temperature", label: "Temperature", kind: "range", min: 0, max: 3, step: 0.05, value: SEEDS.temperature,
    help: "0 = greedy" },
  { name: "top_k", label: "Top-k", kind: "range", min: 0, max: 5, step: 1, value: SEEDS.top_k, help: "0 = off" },
  { name: "top_p", label: "Top-p", kind: "range", min: 0.01, max: 1, step: 0.01, value: SEEDS.top_p, help: "1 = off" },
  { name: "min_p", label: "Min-p", kind: "range", min: 0, max: 1, step: 0.01, value: SEEDS.min_p, help: "0 = off" },
];

function parseLogits(text) {
  const parts = text.split(/[\s,]+/).filter(Boolean);
  const bad = parts.find((part) => !Number.isFinite(Number(part)));
  if (bad !== undefined) throw new Error(`Logits: "${bad}" is not a number`);
  if (!parts.length) throw new Error("Logits: type at least one number");
  return parts.map(Number);
}

function parseLabels(text) {
  const parts = (text.includes(",") ? text.split(",") : text.split(/\s+/)).map((part) => part.trim());
  return parts.some(Boolean) ? parts : null;
}

function round(value) {
  return Number(value.toFixed(HAND_DECIMALS));
}

function cell(value, column, kind = "number") {
  const td = element("td", { "data-col": column, class: kind });
  if (kind === "flag") {
    td.textContent = value ? "✓ in" : "✗ out";
  } else {
    td.textContent = formatProb(value);
    td.title = String(value);
  }
  return td;
}

function finalCell(value) {
  const td = cell(value, "final_prob", "number barcell final");
  const track = element("span", { class: "bar", "aria-hidden": "true" });
  const fill = element("span", { class: "fill" });
  fill.style.width = `${value * 100}%`;
  track.append(fill);
  td.prepend(track);
  return td;
}

function renderTable(table, result) {
  table.replaceChildren();
  const temperature = result.temperature === 0 ? "T=0 (greedy)" : `T=${result.temperature}`;
  const head = element("tr");
  const columns = ["token", "logit", "softmax (T=1)", "cumulative", `top-${result.top_k || "k"} set`, "top-k renorm",
    `nucleus (p=${result.top_p})`, "nucleus renorm", temperature, "final (all filters)"];
  for (const name of columns) head.append(element("th", { scope: "col" }, name));
  table.append(element("caption", { class: "sr-only" }, "The exercise table, most probable token first"));
  table.createTHead().append(head);
  const body = table.createTBody();
  for (const row of result.rows) {
    const tr = element("tr", { class: row.final_prob > 0 ? "kept" : "removed" });
    tr.dataset.label = row.label;
    tr.append(element("th", { scope: "row", "data-col": "label" }, row.label));
    const logit = element("td", { "data-col": "logit", class: "number" }, String(row.logit));
    tr.append(logit, cell(row.prob, "prob"), cell(row.cumulative, "cumulative"), cell(row.in_top_k, "in_top_k", "flag"),
      cell(row.top_k_prob, "top_k_prob"), cell(row.in_nucleus, "in_nucleus", "flag"), cell(row.nucleus_prob, "nucleus_prob"),
      cell(row.temperature_prob, "temperature_prob"), finalCell(row.final_prob));
    body.append(tr);
  }
}

function summaryLines(result) {
  const rows = result.rows;
  const lines = [["greedy", `greedy picks: ${result.greedy}`]];
  if (result.top_k) {
    const kept = rows.filter((row) => row.in_top_k);
    const rounded = kept.map((row) => round(row.prob));
    const sum = rounded.reduce((a, b) => a + b, 0);
    lines.push(["top-k", `top-${result.top_k} set: {${kept.map((row) => row.label).join(", ")}}; by hand `
      + `${kept[0].label} = ${rounded[0].toFixed(3)} / ${sum.toFixed(3)} = ${(rounded[0] / sum).toFixed(3)} `
      + `(exact ${kept[0].top_k_prob.toFixed(4)})`]);
  }
  if (result.top_p < 1) {
    const nucleus = rows.filter((row) => row.in_nucleus);
    lines.push(["nucleus", `nucleus at p=${result.top_p}: {${nucleus.map((row) => row.label).join(", ")}} `
      + `(size ${nucleus.length}; cumulative ${formatProb(nucleus.at(-1).cumulative)} ≥ ${result.top_p})`]);
  }
  lines.push(["temperature", `temperature ${result.temperature}: p(${rows[0].label}) = ${formatProb(rows[0].temperature_prob)} `
    + `(T=1: ${formatProb(rows[0].prob)})`]);
  const survivors = rows.filter((row) => row.final_prob > 0).map((row) => `${row.label} ${formatProb(row.final_prob)}`);
  lines.push(["final", `pipeline T=${result.temperature} → top-k=${result.top_k || "off"} → top-p=${result.top_p} → `
    + `min-p=${result.min_p}: ${survivors.join(", ")}`]);
  return lines;
}

export function setupLab() {
  const $ = (id) => document.getElementById(id);
  renderControls($("lab-sliders"), LAB_FIELDS, "lab");
  let controller = null;
  let latest = 0;

  async function recompute() {
    const ticket = ++latest;
    controller?.abort();
    controller = new AbortController();
    let body;
    try {
      const logits = parseLogits($("lab-logits").value);
      for (const id of ["lab-top_k", "lab-top_k-range"]) $(id).max = String(logits.length);
      body = { logits, labels: parseLabels($("lab-labels").value), ...readControls(LAB_FIELDS, "lab") };
      if (body.labels === null) delete body.labels;
      const result = await postJSON("/v1/lab", body, { signal: controller.signal });
      if (ticket !== latest) return;
      clearError();
      renderTable($("lab-table"), result);
      $("lab-summary").replaceChildren(...summaryLines(result).map(([key, text]) => element("li", { id: `lab-line-${key}` }, text)));
      $("lab-status").textContent = "";
    } catch (error) {
      if (error.name === "AbortError" || ticket !== latest) return;
      $("lab-status").textContent = "Not recomputed: fix the input.";
      showError(error);
    }
  }

  $("lab-form").addEventListener("input", recompute);
  document.addEventListener("apikeychange", recompute);
  $("lab-form").addEventListener("submit", (event) => event.preventDefault());
  $("lab-reset").addEventListener("click", () => {
    $("lab-logits").value = SEEDS.logits;
    $("lab-labels").value = SEEDS.labels;
    for (const field of LAB_FIELDS) {
      $(`lab-${field.name}`).value = $(`lab-${field.name}-range`).value = String(SEEDS[field.name]);
    }
    recompute();
  });
  recompute();
}
