// How numbers, times and record bytes are shown.

const pad = (n, width = 2) => String(n).padStart(width, '0');

// Local time with milliseconds, the precision of Kafka timestamps: 2024-05-01 12:00:00.123
export function formatTime(ms) {
  if (ms === null || ms === undefined || ms < 0) return '–';
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
    + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

// A time typed by a person: "2024-05-01 12:00", "2024-05-01T12:00:00.123" (local time,
// or with Z / +02:00) or milliseconds since the epoch. Returns ms, or null.
export function parseTime(text) {
  const trimmed = text.trim();
  if (/^\d{10,}$/.test(trimmed)) return Number(trimmed);
  const iso = trimmed.replace(' ', 'T');
  if (!/^\d{4}-\d{2}-\d{2}/.test(iso)) return null;
  const ms = new Date(iso.length === 10 ? `${iso}T00:00:00` : iso).getTime();
  return Number.isNaN(ms) ? null : ms;
}

// A chart's time tick, on one line: hours and minutes, with seconds when the ticks are
// less than a minute apart.
export function formatClock(seconds, withSeconds) {
  const d = new Date(seconds * 1000);
  const clock = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return withSeconds ? `${clock}:${pad(d.getSeconds())}` : clock;
}

export function formatNumber(n) {
  if (n === null || n === undefined) return '–';
  return n.toLocaleString('en-US');
}

export function formatRate(perSecond) {
  if (perSecond === null || perSecond === undefined) return '–';
  if (perSecond === 0) return '0';
  if (perSecond < 10) return perSecond.toFixed(2);
  return Math.round(perSecond).toLocaleString('en-US');
}

export function formatBytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

export function formatByteRate(perSecond) {
  if (perSecond === null || perSecond === undefined) return '–';
  if (perSecond < 10) return `${Number(perSecond.toFixed(1))} B/s`;
  return `${formatBytes(Math.round(perSecond))}/s`;
}

// Kafka's duration configs are milliseconds; -1 means forever.
export function formatMs(text) {
  if (text === undefined || text === null) return '–';
  const ms = Number(text);
  if (ms < 0) return 'forever';
  const units = [[86400000, 'd'], [3600000, 'h'], [60000, 'min'], [1000, 's']];
  for (const [size, name] of units) {
    if (ms >= size && ms % size === 0) return `${ms / size} ${name}`;
  }
  return `${ms} ms`;
}

export function formatSize(text) {
  if (text === undefined || text === null) return '–';
  const n = Number(text);
  return n < 0 ? 'unlimited' : formatBytes(n);
}

// ---- record bytes: base64 from the server, shown as text, JSON or hex
export function decodeBase64(b64) {
  if (b64 === null || b64 === undefined) return null;
  const raw = atob(b64);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i += 1) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

const utf8 = new TextDecoder('utf-8', { fatal: false });

export function asText(bytes) {
  return bytes === null ? null : utf8.decode(bytes);
}

export function asHex(bytes) {
  if (bytes === null) return null;
  const lines = [];
  for (let offset = 0; offset < bytes.length; offset += 16) {
    const chunk = bytes.subarray(offset, offset + 16);
    const hex = Array.from(chunk, (b) => pad(b.toString(16))).join(' ');
    const ascii = Array.from(chunk, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${offset.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join('\n');
}

// The JSON view pretty-prints values that parse; the rest fall back to text.
export function asJson(bytes) {
  const text = asText(bytes);
  if (text === null) return { text: null, json: false };
  try {
    return { text: JSON.stringify(JSON.parse(text), null, 2), json: true };
  } catch {
    return { text, json: false };
  }
}

export function render(bytes, view) {
  if (bytes === null) return { text: null, note: null };
  if (view === 'hex') return { text: asHex(bytes), note: null };
  if (view === 'json') {
    const { text, json } = asJson(bytes);
    return { text, note: json ? null : 'not JSON: shown as text' };
  }
  return { text: asText(bytes), note: null };
}
