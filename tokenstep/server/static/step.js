// The step view: one sampler step from the server's trace, as a bar chart with its numbers — the
// model's raw probabilities, after penalties and temperature, which filter removed each candidate,
// and the renormalised final probabilities the drawn token came from.

import { element } from "./controls.js";
import { chosenCandidate, formatProb, visible } from "./stream.js";

function bar(p, kind) {
  const cell = element("td", { class: `barcell ${kind}` });
  const track = element("span", { class: "bar", "aria-hidden": "true" });
  const fill = element("span", { class: "fill" });
  fill.style.width = `${Math.max(0, Math.min(1, p)) * 100}%`;
  track.append(fill);
  cell.append(track, element("span", { class: "num" }, formatProb(p)));
  cell.title = String(p);
  return cell;
}

/** Which stage removed a candidate ("" if it was kept). Flags are cumulative: top-p is evaluated on
 *  what top-k kept, min-p on what top-p kept. */
export function removedBy(candidate, trace) {
  if (candidate.final_prob > 0) return "";
  if (trace.greedy) return "greedy: only the argmax";
  if (!candidate.kept_top_k) return "top-k";
  if (!candidate.kept_top_p) return "top-p";
  if (!candidate.kept_min_p) return "min-p";
  return "zero probability";
}

function setting(value, off) {
  return value === off || (off === 0 && value === -1) ? "off" : String(value);
}

function parameters(trace) {
  const list = element("dl", { class: "params" });
  const items = [
    ["temperature", trace.greedy ? "0 (greedy)" : String(trace.temperature)],
    ["top-k", setting(trace.top_k, 0)],
    ["top-p", setting(trace.top_p, 1)],
    ["min-p", setting(trace.min_p, 0)],
    ["nucleus size", trace.greedy ? "1 (greedy)" : trace.top_p >= 1 ? `${trace.nucleus_size} (top-p off: all)`
      : String(trace.nucleus_size)],
    ["tokens left to draw from", String(trace.num_kept)],
  ];
  for (const [name, value] of items) list.append(element("dt", {}, name), element("dd", {}, value));
  return list;
}

function table(trace) {
  const result = element("table", { class: "bars" });
  result.append(element("caption", { class: "sr-only" }, "Candidates of this step, most probable first"));
  const head = element("tr");
  for (const name of ["", "token", "raw (model)", "after T", "removed by", "final"]) {
    head.append(element("th", { scope: "col" }, name));
  }
  result.append(element("thead"));
  result.tHead.append(head);
  const body = element("tbody");
  for (const candidate of trace.candidates) {
    const chosen = candidate.token_id === trace.chosen_token_id;
    const removed = removedBy(candidate, trace);
    const row = element("tr", { class: (chosen ? "chosen " : "") + (removed ? "removed" : "kept") });
    row.dataset.tokenId = String(candidate.token_id);
    const mark = element("td", { class: "mark" }, chosen ? "▶" : "");
    if (chosen) mark.append(element("span", { class: "sr-only" }, "drawn"));
    const token = element("th", { scope: "row", class: "token" });
    token.append(element("code", {}, visible(candidate.text)), element("span", { class: "muted id" }, `#${candidate.token_id}`));
    row.append(mark, token, bar(candidate.raw_prob, "raw"), bar(candidate.scaled_prob, "scaled"),
      element("td", { class: "removed-by" }, removed ? `✗ ${removed}` : "✓ kept"), bar(candidate.final_prob, "final"));
    body.append(row);
  }
  result.append(body);
  return result;
}

/** Draw `piece` (a piece of generated text and its steps) into `container`; `which` picks one of
 *  the piece's steps when its text came from several tokens; `title` names the stream (Compare). */
export function renderStep(container, piece, which = 0, title = "") {
  container.replaceChildren();
  container.hidden = false;
  const step = piece.steps[which];
  if (!step) {
    container.append(element("p", { class: "muted" }, "No step information for this text."));
    return;
  }
  const heading = element("h2", {}, `${title ? `${title} · ` : ""}Step ${step.index + 1}`);
  container.append(heading);
  if (piece.steps.length > 1) {
    const nav = element("p", { class: "small" }, `This text came from ${piece.steps.length} tokens: `);
    piece.steps.forEach((other, i) => {
      const button = element("button", { type: "button", class: "link" }, `step ${other.index + 1}`);
      if (i === which) button.setAttribute("aria-current", "true");
      button.addEventListener("click", () => { renderStep(container, piece, i, title); container.focus(); });
      nav.append(button, " ");
    });
    container.append(nav);
  }
  if (!step.trace) {
    const p = step.logprob ? Math.exp(step.logprob.logprob) : null;
    container.append(element("p", {}, `drew ${visible(step.logprob?.token ?? "")} with model probability ${formatProb(p)}.`),
      element("p", { class: "muted" }, "Set Candidates above 0 to see the whole step."));
    return;
  }
  const trace = step.trace;
  const chosen = chosenCandidate(trace);
  const drew = element("p", { class: "drew" });
  drew.append("drew ", element("code", {}, visible(chosen.text)), ` (token #${chosen.token_id}) with probability `,
    element("strong", {}, formatProb(chosen.final_prob)), `; the model gave it ${formatProb(chosen.raw_prob)}.`);
  const wrap = element("div", { class: "bars-wrap" });
  wrap.append(table(trace));
  container.append(drew, parameters(trace), wrap);
  const rawShown = trace.candidates.reduce((sum, c) => sum + c.raw_prob, 0);
  container.append(element("p", { class: "muted small" },
    `Rows: the ${trace.candidates.length} most probable tokens under the model (and the drawn one). Together they hold `
    + `${formatProb(rawShown)} of the model's probability; the rest of the vocabulary holds ${formatProb(Math.max(0, 1 - rawShown))}. `
    + "After T = after penalties, logit bias and temperature, before any filter. Final = renormalised over the "
    + "tokens every filter kept: the drawn token came from it."));
}
