// The server's public API, as the page uses it: JSON requests and server-sent-event streams over
// fetch. The API key (if the server has one) lives in this tab's sessionStorage only.

const KEY_STORAGE = "tokenstep.apiKey";

export class ApiError extends Error {
  /** An OpenAI-shaped error: {message, type, param, code}, plus the HTTP status. */
  constructor(status, error) {
    super(error?.message || `HTTP ${status}`);
    this.status = status;
    this.param = error?.param ?? null;
    this.code = error?.code ?? null;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

function headers() {
  const result = { "Content-Type": "application/json" };
  const key = apiKey();
  if (key) result.Authorization = `Bearer ${key}`;
  return result;
}

async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: keep the status alone
  }
  return new ApiError(response.status, body?.error);
}

export async function getJSON(path, { signal } = {}) {
  const response = await fetch(path, { headers: headers(), signal });
  if (!response.ok) throw await failure(response);
  return response.json();
}

export async function postJSON(path, body, { signal } = {}) {
  const response = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body), signal });
  if (!response.ok) throw await failure(response);
  return response.json();
}

/**
 * POST `body` (with stream: true) and yield each `data: {...}` event's JSON until `data: [DONE]`.
 * Aborting `signal` closes the connection, and the server aborts the engine request.
 */
export async function* streamEvents(path, body, { signal } = {}) {
  const response = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body), signal });
  if (!response.ok) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = event.split("\n").filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).trimStart()).join("\n");
        if (!data) continue;
        if (data === "[DONE]") return;
        const payload = JSON.parse(data);
        if (payload.error) throw new ApiError(response.status, payload.error); // in-band, after the stream began
        yield payload;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
