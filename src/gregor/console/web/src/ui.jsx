import { useState } from 'preact/hooks';

// An error from the broker or the server, in words, where the action was taken.
export function ErrorBox({ error, prefix }) {
  if (!error) return null;
  return (
    <div class="error" role="alert">
      {prefix ? <strong>{prefix} </strong> : null}
      {error.message || String(error)}
    </div>
  );
}

export function Notice({ children, kind = 'ok' }) {
  return <div class={`notice ${kind}`} role="status">{children}</div>;
}

export function Stat({ label, value, kind, name }) {
  return (
    <div class={`stat ${kind || ''}`} data-stat={name}>
      <div class="stat-value">{value}</div>
      <div class="stat-label">{label}</div>
    </div>
  );
}

export function Badge({ children, kind = 'neutral' }) {
  return <span class={`badge ${kind}`}>{children}</span>;
}

// Tables scroll sideways inside their box on a narrow screen; the page never does.
export function Table({ children, name }) {
  return <div class="table-box"><table data-table={name}>{children}</table></div>;
}

export function Loading({ what }) {
  return <p class="muted loading">Loading {what}…</p>;
}

// A destructive action asks once more, inline, before it runs.
export function ConfirmButton({ label, question, confirmLabel, onConfirm, busy, name }) {
  const [asking, setAsking] = useState(false);
  if (!asking) {
    return (
      <button type="button" class="danger" data-action={name} onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  }
  return (
    <span class="confirm">
      <span>{question}</span>
      <button type="button" class="danger" data-action={`${name}-confirm`} disabled={busy}
        onClick={async () => { await onConfirm(); setAsking(false); }}>
        {busy ? 'Working…' : confirmLabel}
      </button>
      <button type="button" onClick={() => setAsking(false)}>Cancel</button>
    </span>
  );
}

export function Field({ label, children, hint }) {
  return (
    <label class="field">
      <span class="field-label">{label}</span>
      {children}
      {hint ? <span class="hint">{hint}</span> : null}
    </label>
  );
}
