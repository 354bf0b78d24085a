// The console's JSON API. Every failure becomes an Error whose message is the
// server's words ("cannot create topic 'x': ..."), ready to show where the action was.

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

// Longer than any server-side Kafka call (10 s plus margins): the server always
// answers first, with the cause; this only catches a console that went away.
const TIMEOUT_MS = 30000;

export async function api(path, { method = 'GET', body } = {}) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), TIMEOUT_MS);
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: controller.signal,
    });
  } catch (error) {
    throw new ApiError(error.name === 'AbortError'
      ? 'the console server did not answer in time'
      : 'cannot reach the console server (is gregor console still running?)', 0);
  } finally {
    clearTimeout(timer);
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    // a proxy's HTML error page, or an empty body
  }
  if (!response.ok) {
    throw new ApiError((data && data.error) || `${response.status} ${response.statusText}`,
      response.status);
  }
  return data;
}

export const enc = encodeURIComponent;

export function query(params) {
  const parts = Object.entries(params)
    .filter(([, value]) => value !== undefined && value !== null && value !== '')
    .map(([name, value]) => `${enc(name)}=${enc(value)}`);
  return parts.length ? `?${parts.join('&')}` : '';
}
