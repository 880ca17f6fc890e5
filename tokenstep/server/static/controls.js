// Labelled form controls built from a list of field specs, so the Generate view, the Compare
// columns and the Lab share one way to draw and read a setting. Names are the API's field names.

/** The Generate view's settings (ranges as in docs/sampling.md). */
export const SAMPLING_FIELDS = [
  { name: "temperature", label: "Temperature", kind: "range", min: 0, max: 2, step: 0.05, value: 0.7, help: "0 = greedy" },
  { name: "top_p", label: "Top-p", kind: "range", min: 0.01, max: 1, step: 0.01, value: 0.9, help: "1 = off" },
  { name: "min_p", label: "Min-p", kind: "range", min: 0, max: 1, step: 0.01, value: 0, help: "0 = off" },
  { name: "top_k", label: "Top-k", kind: "number", min: 0, max: 1000, step: 1, value: 0, help: "0 = off" },
  { name: "max_tokens", label: "Max tokens", kind: "number", min: 1, max: 4096, step: 1, value: 64 },
  { name: "seed", label: "Seed", kind: "number", min: 0, step: 1, value: 0, optional: true, help: "blank = random" },
  { name: "trace", label: "Candidates", kind: "number", min: 0, max: 100, step: 1, value: 10, help: "per step" },
  { name: "presence_penalty", label: "Presence penalty", kind: "number", min: -2, max: 2, step: 0.1, value: 0, wide: true },
  { name: "frequency_penalty", label: "Frequency penalty", kind: "number", min: -2, max: 2, step: 0.1, value: 0, wide: true },
  { name: "repetition_penalty", label: "Repetition penalty", kind: "number", min: 0.05, max: 3, step: 0.05, value: 1,
    wide: true },
  { name: "stop", label: "Stop strings", kind: "lines", value: "", help: "one per line, at most 4" },
];

/** A Compare column's settings: the ones that change the walk through the distribution. */
export const COMPARE_FIELDS = [
  { name: "temperature", label: "T", kind: "number", min: 0, max: 2, step: 0.05 },
  { name: "top_k", label: "top-k", kind: "number", min: 0, max: 1000, step: 1 },
  { name: "top_p", label: "top-p", kind: "number", min: 0.01, max: 1, step: 0.01 },
  { name: "min_p", label: "min-p", kind: "number", min: 0, max: 1, step: 0.01 },
];

function element(tag, attributes = {}, text = "") {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text) node.textContent = text;
  return node;
}

function numberAttributes(field) {
  const attributes = { type: "number", step: String(field.step ?? "any") };
  if (field.min !== undefined) attributes.min = String(field.min);
  if (field.max !== undefined) attributes.max = String(field.max);
  return attributes;
}

/** Draw `fields` into `container`; ids are `${prefix}-${name}`. `values` overrides the defaults. */
export function renderControls(container, fields, prefix, values = {}) {
  for (const field of fields) {
    const id = `${prefix}-${field.name}`;
    const value = values[field.name] ?? field.value ?? "";
    const row = element("div", { class: `field ${field.kind}${field.wide ? " wide" : ""}` });
    row.append(element("label", { for: id }, field.label));
    let input;
    if (field.kind === "lines") {
      input = element("textarea", { id, rows: "2", spellcheck: "false" });
      input.value = value;
      row.append(input);
    } else if (field.kind === "range") {
      const pair = element("div", { class: "pair" });
      const slider = element("input", { ...numberAttributes(field), type: "range", id: `${id}-range`,
                                        "aria-label": `${field.label} slider` });
      input = element("input", { ...numberAttributes(field), id });
      slider.value = input.value = String(value);
      slider.addEventListener("input", () => { input.value = slider.value; input.dispatchEvent(new Event("input", { bubbles: true })); });
      input.addEventListener("input", () => { if (input.value !== "") slider.value = input.value; });
      pair.append(slider, input);
      row.append(pair);
    } else {
      input = element("input", { ...numberAttributes(field), id });
      input.value = String(value);
      row.append(input);
    }
    input.name = field.name;
    if (field.help) {
      input.setAttribute("aria-describedby", `${id}-help`);
      row.append(element("span", { id: `${id}-help`, class: "muted small" }, field.help));
    }
    container.append(row);
  }
}

/** Read `fields` back as API values. A blank optional number is left out; a bad number throws,
 *  naming the field (the server checks ranges again and says the same). */
export function readControls(fields, prefix) {
  const result = {};
  for (const field of fields) {
    const input = document.getElementById(`${prefix}-${field.name}`);
    const text = input.value.trim();
    if (field.kind === "lines") {
      const lines = input.value.split("\n").filter((line) => line !== "");
      if (lines.length) result[field.name] = lines;
      continue;
    }
    if (text === "" && field.optional) continue;
    const number = Number(text);
    if (text === "" || !Number.isFinite(number)) throw new Error(`${field.label}: enter a number`);
    result[field.name] = field.step === 1 ? Math.trunc(number) : number;
  }
  return result;
}

export { element };
