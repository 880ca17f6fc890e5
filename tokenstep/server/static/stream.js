// One streamed generation drawn as tokens: the request body, the SSE chunks turned into pieces of
// text (each linked to the sampler steps that made it), the live statistics, and keyboard focus.

import { streamEvents } from "./api.js";

const LOGPROBS = 5; // alternatives per token asked for alongside the trace (OpenAI's logprobs)
const REPEAT_NGRAM = 4; // a token inside a 4-token sequence seen earlier in the output counts as repetition
// Shading is by surprise on a log scale: none at p = 1, full at p <= 10^-SHADE_DECADES. A linear scale
// would paint 0.02 and 0.2 alike, and most tokens of most models sit in that range.
const SHADE_DECADES = 3;
const SCROLL_SLACK_PX = 24; // a reader this close to the bottom of the output is following the stream

/** How strongly to shade a token of probability p (0..1). */
export function surprise(p) {
  return Math.min(1, -Math.log10(Math.max(p, 1e-300)) / SHADE_DECADES);
}

/** The request for `settings` (SamplingParams names) on the completions or chat endpoint. */
export function requestFor({ mode, prompt, system, model, settings }) {
  const body = { model, ...settings, stream: true, stream_options: { include_usage: true } };
  if (mode === "chat") {
    body.messages = [...(system ? [{ role: "system", content: system }] : []), { role: "user", content: prompt }];
    Object.assign(body, { logprobs: true, top_logprobs: LOGPROBS });
    return { path: "/v1/chat/completions", body };
  }
  Object.assign(body, { prompt, logprobs: LOGPROBS });
  return { path: "/v1/completions", body };
}

/** Text made visible: spaces, newlines and tabs as glyphs, the empty string as ∅. */
export function visible(text) {
  return text === "" ? "∅" : text.replace(/ /g, "␣").replace(/\n/g, "⏎").replace(/\t/g, "⇥");
}

/** A probability as text: three decimals, or two significant digits when smaller than 0.001. */
export function formatProb(p) {
  if (p === null || p === undefined) return "–";
  return p === 0 || p >= 0.001 ? p.toFixed(3) : p.toExponential(1);
}

/** The chosen candidate of a trace step. */
export function chosenCandidate(trace) {
  return trace.candidates.find((candidate) => candidate.token_id === trace.chosen_token_id);
}

function stepProb(step, shade) {
  if (step.trace) {
    const chosen = chosenCandidate(step.trace);
    return shade === "final" ? chosen.final_prob : chosen.raw_prob;
  }
  return step.logprob ? Math.exp(step.logprob.logprob) : null;
}

function logprobEntries(choice) {
  const logprobs = choice.logprobs;
  if (!logprobs) return [];
  if (logprobs.content) return logprobs.content.map(({ token, logprob }) => ({ token, logprob })); // chat
  return (logprobs.tokens || []).map((token, i) => ({ token, logprob: logprobs.token_logprobs[i] }));
}

export class TokenStream {
  /** Draws into `output` (an element); `onSelect(piece, stream)` is called when a token is chosen. */
  constructor(output, { onSelect, shade = "raw", numbers = false, markRepeats = false }) {
    this.output = output;
    this.onSelect = onSelect;
    this.shade = shade;
    this.markRepeats = markRepeats;
    this.setNumbers(numbers);
    output.addEventListener("click", (event) => {
      const node = event.target.closest(".tok");
      if (node) this.select(Number(node.dataset.piece), true);
    });
    output.addEventListener("keydown", (event) => this.onKey(event));
    this.reset();
  }

  reset() {
    this.output.replaceChildren();
    this.pieces = []; // {text, steps: [{index, trace, logprob}], node, held}
    this.steps = [];
    this.pending = [];
    this.ngrams = new Map();
    this.numRepeated = 0;
    this.repeated = new Set();
    this.stats = { startedAt: performance.now(), firstAt: null, lastAt: null, finishReason: null, usage: null };
    this.focusIndex = 0;
  }

  /** Take one choice of one SSE chunk (completions or chat). */
  addChoice(choice) {
    const traces = choice.trace || [];
    const logprobs = logprobEntries(choice);
    const count = Math.max(traces.length, logprobs.length);
    const now = performance.now();
    for (let i = 0; i < count; i++) {
      const step = { index: this.steps.length, trace: traces[i] || null, logprob: logprobs[i] || null };
      this.steps.push(step);
      this.pending.push(step);
      this.stats.firstAt ??= now;
      this.stats.lastAt = now;
      this.trackRepeats(step);
    }
    const text = choice.text ?? choice.delta?.content ?? "";
    // A step whose text is held back (half a UTF-8 character, a possible stop string) joins the next text.
    if (text) {
      this.stats.firstAt ??= now;
      this.addPiece(text, this.pending, false);
      this.pending = [];
    }
    if (choice.finish_reason) this.finish(choice.finish_reason);
  }

  /** The stream ended (finish_reason, or null when stopped): steps whose text never came are shown apart. */
  finish(reason) {
    this.stats.finishReason ??= reason;
    if (this.pending.length) {
      const text = this.pending.map((step) => (step.trace ? chosenCandidate(step.trace).text : step.logprob?.token || "")).join("");
      this.addPiece(text, this.pending, true);
      this.pending = [];
    }
  }

  addPiece(text, steps, held) {
    const index = this.pieces.length;
    const node = document.createElement("span");
    node.className = "tok" + (held ? " held" : "") + (text.includes("\n") ? " nl" : "");
    node.textContent = text;
    node.dataset.piece = String(index);
    node.dataset.tokenIds = steps.map((step) => step.trace?.chosen_token_id ?? "").join(" ");
    node.dataset.firstStep = steps.length ? String(steps[0].index + 1) : "";
    node.setAttribute("role", "button");
    node.tabIndex = index === this.focusIndex ? 0 : -1;
    const piece = { index, text, steps, node, held };
    this.pieces.push(piece);
    this.paint(piece);
    const output = this.output;
    const following = output.scrollHeight - output.scrollTop - output.clientHeight < SCROLL_SLACK_PX;
    output.append(node);
    if (following) output.scrollTop = output.scrollHeight;
  }

  paint(piece) {
    const probs = piece.steps.map((step) => stepProb(step, this.shade));
    const known = probs.length > 0 && probs.every((p) => p !== null);
    const p = known ? probs.reduce((a, b) => a * b, 1) : null; // the probability of the whole piece
    piece.node.style.setProperty("--surprise", known ? surprise(p).toFixed(3) : "0");
    piece.node.dataset.p = known ? formatProb(p) : "";
    const which = this.shade === "final" ? "sampling" : "model";
    const steps = piece.steps.map((step) => step.index + 1).join(", ");
    piece.node.title = `${piece.held ? "not in the output text (special token or stop string) · " : ""}${which} probability ${known ? formatProb(p) : "unknown"}`
      + (steps ? ` · step ${steps}` : "");
    const repeated = this.markRepeats && piece.steps.some((step) => this.repeated.has(step.index));
    piece.node.classList.toggle("rep", repeated);
  }

  setShade(shade) {
    this.shade = shade;
    for (const piece of this.pieces) this.paint(piece);
  }

  setNumbers(on) {
    this.output.classList.toggle("numbers", on);
  }

  trackRepeats(step) {
    if (!this.markRepeats || !step.trace) return;
    const start = step.index - REPEAT_NGRAM + 1;
    if (start < 0) return;
    const key = this.steps.slice(start).map((s) => s.trace?.chosen_token_id).join(",");
    if (this.ngrams.has(key)) {
      for (let i = start; i <= step.index; i++) this.repeated.add(i);
      for (const piece of this.pieces.slice(-REPEAT_NGRAM)) this.paint(piece); // earlier pieces of this n-gram
    } else {
      this.ngrams.set(key, start);
    }
  }

  /** Share of generated tokens inside a repeated n-gram (0..1). */
  repeatShare() {
    return this.steps.length ? this.repeated.size / this.steps.length : 0;
  }

  select(index, focus) {
    const piece = this.pieces[index];
    if (!piece) return;
    for (const other of this.output.querySelectorAll(".tok[aria-current]")) other.removeAttribute("aria-current");
    piece.node.setAttribute("aria-current", "true");
    this.moveFocus(index, focus);
    this.onSelect?.(piece, this);
  }

  moveFocus(index, focus) {
    const previous = this.pieces[this.focusIndex];
    if (previous) previous.node.tabIndex = -1;
    this.focusIndex = index;
    this.pieces[index].node.tabIndex = 0;
    if (focus) this.pieces[index].node.focus();
  }

  onKey(event) {
    const moves = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
    const last = this.pieces.length - 1;
    if (last < 0) return;
    let target = null;
    if (event.key in moves) target = Math.min(last, Math.max(0, this.focusIndex + moves[event.key]));
    else if (event.key === "Home") target = 0;
    else if (event.key === "End") target = last;
    else if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      this.select(this.focusIndex, true);
      return;
    }
    if (target !== null) {
      event.preventDefault();
      this.moveFocus(target, true);
    }
  }

  /** Live numbers: time to first token, tokens, tokens per second over the decode. */
  summary() {
    const { startedAt, firstAt, lastAt } = this.stats;
    const now = this.stats.finishReason ? lastAt ?? performance.now() : performance.now();
    const tokens = this.stats.usage?.completion_tokens ?? this.steps.length;
    const decodeSeconds = firstAt !== null && lastAt > firstAt ? (lastAt - firstAt) / 1000 : 0;
    return {
      ttftMs: firstAt !== null ? firstAt - startedAt : null,
      tokens,
      tokensPerSecond: decodeSeconds > 0 ? (this.steps.length - 1) / decodeSeconds : null,
      elapsedS: (now - startedAt) / 1000,
      finishReason: this.stats.finishReason,
    };
  }

  /** Stream `request` ({path, body}) into this view; resolves with the finish reason ("stopped" if aborted). */
  async run(request, { signal, onChunk }) {
    this.reset();
    try {
      for await (const chunk of streamEvents(request.path, request.body, { signal })) {
        if (chunk.usage) this.stats.usage = chunk.usage;
        for (const choice of chunk.choices) this.addChoice(choice);
        onChunk?.();
      }
      this.finish(this.stats.finishReason);
    } catch (error) {
      if (error.name !== "AbortError") throw error;
      this.finish("stopped");
    }
    return this.stats.finishReason;
  }
}
