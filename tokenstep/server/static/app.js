// The playground's entry point: tabs, the API key, and the Generate view (one stream, click a token
// for its step). Compare and Lab live in their own modules.

import { apiKey, setApiKey } from "./api.js";
import { setupCompare } from "./compare.js";
import { SAMPLING_FIELDS, readControls, renderControls } from "./controls.js";
import { setupLab } from "./lab.js";
import { STATS_INTERVAL_MS, bindRunButtons, clearError, currentModel, forgetModel, renderStats, showError } from "./page.js";
import { renderStep } from "./step.js";
import { TokenStream, requestFor } from "./stream.js";


function setupTabs() {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  const show = (tab, focus) => {
    for (const other of tabs) {
      const selected = other === tab;
      other.setAttribute("aria-selected", String(selected));
      other.tabIndex = selected ? 0 : -1;
      document.getElementById(other.getAttribute("aria-controls")).hidden = !selected;
    }
    if (focus) tab.focus();
    history.replaceState(null, "", `#${tab.id.replace("tab-", "")}`);
  };
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => show(tab, false));
    tab.addEventListener("keydown", (event) => {
      const moves = { ArrowRight: 1, ArrowLeft: -1 };
      if (event.key in moves) show(tabs[(i + moves[event.key] + tabs.length) % tabs.length], true);
      else if (event.key === "Home") show(tabs[0], true);
      else if (event.key === "End") show(tabs[tabs.length - 1], true);
    });
  });
  const start = tabs.find((tab) => `#${tab.id.replace("tab-", "")}` === location.hash);
  if (start) show(start, false);
}

function setupKey() {
  const input = document.getElementById("api-key");
  input.value = apiKey();
  input.addEventListener("change", () => {
    setApiKey(input.value.trim());
    forgetModel();
    clearError();
    currentModel();
    document.dispatchEvent(new Event("apikeychange")); // views that loaded nothing without the key try again
  });
}

function setupGenerate() {
  const $ = (id) => document.getElementById(id);
  renderControls($("gen-controls"), SAMPLING_FIELDS, "gen");
  const stepView = $("gen-step");
  const stream = new TokenStream($("gen-output"), { onSelect: (piece) => renderStep(stepView, piece) });
  const stats = $("gen-stats");
  const mode = () => document.querySelector('input[name="gen-mode"]:checked').value;
  let controller = null;

  const update = () => renderStats(stats, stream.summary());
  update();
  for (const radio of document.querySelectorAll('input[name="gen-mode"]')) {
    radio.addEventListener("change", () => {
      $("gen-system-row").hidden = mode() !== "chat";
      $("gen-prompt-label").textContent = mode() === "chat" ? "User message" : "Prompt";
    });
  }
  $("gen-numbers").addEventListener("change", (event) => stream.setNumbers(event.target.checked));
  $("gen-shade").addEventListener("change", (event) => stream.setShade(event.target.value));

  async function generate() {
    if (controller) return;
    clearError();
    let settings;
    try {
      settings = readControls(SAMPLING_FIELDS, "gen");
    } catch (error) {
      showError(error);
      return;
    }
    const model = await currentModel();
    if (!model) return;
    const request = requestFor({ mode: mode(), prompt: $("gen-prompt").value, system: $("gen-system").value.trim(),
                                 model, settings });
    controller = new AbortController();
    $("gen-run").disabled = true;
    $("gen-cancel").disabled = false;
    $("gen-status").textContent = "Generating…";
    stepView.replaceChildren(Object.assign(document.createElement("p"), {
      className: "muted", textContent: "Click any token to see the distribution it was drawn from." }));
    const timer = setInterval(update, STATS_INTERVAL_MS);
    try {
      const reason = await stream.run(request, { signal: controller.signal, onChunk: update });
      const count = stream.summary().tokens;
      $("gen-status").textContent = reason === "stopped" ? `Stopped after ${count} tokens.`
        : `Finished (${reason}) after ${count} tokens.`;
    } catch (error) {
      showError(error);
      $("gen-status").textContent = "Failed.";
    } finally {
      clearInterval(timer);
      const hadFocus = document.activeElement === $("gen-cancel");
      controller = null;
      $("gen-run").disabled = false;
      $("gen-cancel").disabled = true;
      if (hadFocus) $("gen-run").focus();
      update();
    }
  }

  bindRunButtons("generate", "gen", generate, () => controller?.abort());
}

setupTabs();
setupKey();
setupGenerate();
setupCompare();
setupLab();
currentModel();
