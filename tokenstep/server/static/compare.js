// The Compare view: one prompt and seed under 2-4 settings, streamed at once — different walks
// through the same distributions. Tokens inside a repeated 4-gram are underlined, so greedy's loops show.

import { COMPARE_FIELDS, element, readControls, renderControls } from "./controls.js";
import { STATS_INTERVAL_MS, bindRunButtons, clearError, currentModel, renderStats, showError } from "./page.js";
import { renderStep } from "./step.js";
import { TokenStream, requestFor } from "./stream.js";

const PRESETS = [
  { temperature: 0, top_k: 0, top_p: 1, min_p: 0 },
  { temperature: 0.7, top_k: 0, top_p: 0.9, min_p: 0 },
  { temperature: 1.5, top_k: 0, top_p: 1, min_p: 0 },
  { temperature: 1, top_k: 40, top_p: 1, min_p: 0.05 },
];
const MIN_COLUMNS = 2;
const MAX_COLUMNS = 4;
const TRACE = 10; // candidates per step, for the step view

/** A column's settings in words: "greedy", or "T=0.7 · top-p 0.9". */
export function describe(settings) {
  if (settings.temperature === 0) return "greedy";
  const parts = [`T=${settings.temperature}`];
  if (settings.top_k > 0) parts.push(`top-k ${settings.top_k}`);
  if (settings.top_p < 1) parts.push(`top-p ${settings.top_p}`);
  if (settings.min_p > 0) parts.push(`min-p ${settings.min_p}`);
  return parts.join(" · ");
}

export function setupCompare() {
  const $ = (id) => document.getElementById(id);
  const container = $("cmp-columns");
  const stepView = $("cmp-step");
  const columns = [];
  let nextId = 0;
  let controller = null;

  function settingsOf(column) {
    return readControls(COMPARE_FIELDS, column.prefix);
  }

  function retitle(column) {
    let name;
    try {
      name = describe(settingsOf(column));
    } catch {
      name = "(incomplete settings)";
    }
    column.title.textContent = `${columns.indexOf(column) + 1}: ${name}`;
  }

  function addColumn(preset) {
    const prefix = `cmp${nextId++}`;
    const section = element("section", { class: "column", "aria-labelledby": `${prefix}-title` });
    const title = element("h2", { id: `${prefix}-title` });
    const settings = element("div", { class: "mini", role: "group", "aria-label": "Settings of this column" });
    const stats = element("dl", { class: "stats compact" });
    const output = element("div", { class: "output", "aria-live": "polite", "aria-label": "Generated tokens" });
    const repetition = element("p", { class: "repetition small" });
    const remove = element("button", { type: "button", class: "link remove" }, "Remove column");
    section.append(title, settings, stats, output, repetition, remove);
    container.append(section);
    renderControls(settings, COMPARE_FIELDS, prefix, preset);
    const column = { prefix, section, title, stats, output, repetition, remove };
    column.stream = new TokenStream(output, {
      markRepeats: true,
      onSelect: (piece) => renderStep(stepView, piece, 0, `Column ${column.title.textContent}`),
    });
    settings.addEventListener("input", () => retitle(column));
    remove.addEventListener("click", () => {
      columns.splice(columns.indexOf(column), 1);
      section.remove();
      refresh();
      $("cmp-add").focus();
    });
    columns.push(column);
    refresh();
    return column;
  }

  function refresh() {
    for (const column of columns) {
      retitle(column);
      column.remove.hidden = columns.length <= MIN_COLUMNS || controller !== null;
      update(column);
    }
    $("cmp-add").disabled = columns.length >= MAX_COLUMNS || controller !== null;
    container.style.setProperty("--columns", String(columns.length));
  }

  function update(column) {
    renderStats(column.stats, column.stream.summary());
    const share = column.stream.repeatShare();
    column.repetition.textContent = column.stream.steps.length
      ? `repetition: ${Math.round(share * 100)}% of tokens are in a repeated 4-gram` : "";
  }

  async function runColumn(column, shared, model, signal) {
    const request = requestFor({ ...shared, model, settings: { ...shared.settings, ...settingsOf(column), trace: TRACE } });
    column.section.dataset.finish = "";
    const reason = await column.stream.run(request, { signal, onChunk: () => update(column) });
    column.section.dataset.finish = reason ?? "";
    update(column);
  }

  async function runAll() {
    if (controller) return;
    clearError();
    let shared;
    try {
      const seed = $("cmp-seed").value.trim();
      const maxTokens = Number($("cmp-max-tokens").value);
      if (!Number.isInteger(maxTokens)) throw new Error("Max tokens: enter a whole number");
      for (const column of columns) settingsOf(column); // a bad number is reported before anything starts
      shared = {
        mode: document.querySelector('input[name="cmp-mode"]:checked').value,
        prompt: $("cmp-prompt").value,
        settings: { max_tokens: maxTokens, ...(seed === "" ? {} : { seed: Number(seed) }) },
      };
    } catch (error) {
      showError(error);
      return;
    }
    const model = await currentModel();
    if (!model) return;
    controller = new AbortController();
    refresh();
    $("cmp-run").disabled = true;
    $("cmp-cancel").disabled = false;
    $("cmp-status").textContent = `Streaming ${columns.length} columns at once…`;
    stepView.hidden = true;
    const timer = setInterval(() => columns.forEach(update), STATS_INTERVAL_MS);
    const results = await Promise.allSettled(columns.map((column) => runColumn(column, shared, model, controller.signal)));
    clearInterval(timer);
    const failed = results.find((result) => result.status === "rejected");
    if (failed) showError(failed.reason);
    const stopped = controller.signal.aborted;
    const hadFocus = document.activeElement === $("cmp-cancel");
    controller = null;
    $("cmp-run").disabled = false;
    $("cmp-cancel").disabled = true;
    if (hadFocus) $("cmp-run").focus();
    $("cmp-status").textContent = failed ? "A column failed." : stopped ? "Stopped." : "Done. Click a token to see its step.";
    refresh();
  }

  bindRunButtons("compare", "cmp", runAll, () => controller?.abort());
  $("cmp-add").addEventListener("click", () => addColumn(PRESETS[columns.length % PRESETS.length]));
  for (const preset of PRESETS.slice(0, 3)) addColumn(preset);
}
