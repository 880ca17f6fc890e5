// What the views share: the served model's id, the error banner, and the live statistics list.

import { getJSON } from "./api.js";
import { element } from "./controls.js";

export const STATS_INTERVAL_MS = 100; // live numbers refresh this often (elapsed moves before the first token)

let model = null;

/** The served model's id (GET /v1/models, once); null, with the error shown, when it cannot be read. */
export async function currentModel() {
  if (model) return model.id;
  try {
    const list = await getJSON("/v1/models");
    model = list.data[0];
    const context = model.max_model_len ? ` · context window ${model.max_model_len} tokens` : "";
    document.getElementById("model-info").textContent = `model: ${model.id}${context}`;
    return model.id;
  } catch (error) {
    document.getElementById("model-info").textContent = "model: unknown (see the message above)";
    showError(error);
    return null;
  }
}

export function forgetModel() {
  model = null;
}

/** Show `error` in the alert banner; a 401 sends focus to the API key field. */
export function showError(error) {
  const alert = document.getElementById("alert");
  if (error.status === 401) {
    alert.textContent = `This server needs an API key (${error.message}). Paste it in the API key field at the top.`;
    document.getElementById("api-key").focus();
  } else {
    alert.textContent = error.param ? `${error.message} (field: ${error.param})` : error.message;
  }
  alert.hidden = false;
}

export function clearError() {
  const alert = document.getElementById("alert");
  alert.hidden = true;
  alert.textContent = "";
}

function seconds(value, digits = 2) {
  return value === null ? "–" : value.toFixed(digits);
}

/** Fill a <dl> with a TokenStream's summary (numbers in text: tests and screen readers read them). */
export function renderStats(list, summary) {
  const items = [
    ["TTFT", summary.ttftMs === null ? "–" : `${Math.round(summary.ttftMs)} ms`, "ttft"],
    ["tokens", String(summary.tokens), "tokens"],
    ["tokens/s", seconds(summary.tokensPerSecond, 1), "rate"],
    ["elapsed", `${seconds(summary.elapsedS, 1)} s`, "elapsed"],
    ["finish", summary.finishReason ?? "…", "finish"],
  ];
  list.replaceChildren();
  for (const [name, value, key] of items) {
    const box = element("div");
    box.append(element("dt", {}, name), element("dd", { "data-stat": key }, value));
    list.append(box);
  }
}

/** The run and Stop buttons of a view (`${prefix}-run`, `${prefix}-cancel`), and their keys:
 *  Ctrl+Enter (Cmd+Enter) anywhere in the view runs, Escape stops. */
export function bindRunButtons(view, prefix, run, stop) {
  document.getElementById(`${prefix}-run`).addEventListener("click", run);
  document.getElementById(`${prefix}-cancel`).addEventListener("click", stop);
  document.getElementById(`view-${view}`).addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      run();
    } else if (event.key === "Escape") {
      stop();
    }
  });
}
