import { useEffect, useRef, useState } from 'preact/hooks';
import { api, enc, query } from '../api.js';
import { decodeBase64, formatBytes, formatNumber, formatTime, parseTime, render } from '../format.js';
import { useAction } from '../hooks.js';
import { ErrorBox, Field, Notice } from '../ui.jsx';

const FOLLOW_KEEP = 500;
const PREVIEW_CHARS = 400;

function Bytes({ b64, size, view, full, name }) {
  if (b64 === null) return <span class="null" data-field={name}>null</span>;
  // A closed card shows JSON as it was written (compact); an open one pretty-prints it.
  const { text, note } = render(decodeBase64(b64), view === 'json' && !full ? 'text' : view);
  const shown = full || text.length <= PREVIEW_CHARS ? text : `${text.slice(0, PREVIEW_CHARS)}…`;
  return (
    <>
      <pre class={`bytes ${full ? 'full' : 'preview'}`} data-field={name}>{shown}</pre>
      {full && note && name === 'value' ? <span class="hint">{note}</span> : null}
      {full && size !== null && size > decodeBase64(b64).length ? <span class="hint">first {formatBytes(decodeBase64(b64).length)} of {formatBytes(size)} shown</span> : null}
    </>
  );
}

function MessageCard({ message, view }) {
  const [open, setOpen] = useState(false);
  const key = message.key === null ? null : render(decodeBase64(message.key), 'text').text;
  return (
    <li class={`message ${open ? 'open' : ''}`} data-partition={message.partition} data-offset={message.offset}>
      <button type="button" class="message-head" aria-expanded={open} onClick={() => setOpen(!open)}>
        <span class="meta"><b>P{message.partition}</b> · #{message.offset}</span>
        <span class="meta time" data-field="timestamp">{formatTime(message.timestamp)}</span>
        <span class="meta key">key: <span data-field="key-preview">{key === null ? 'null' : key.slice(0, 80)}</span></span>
        {message.headers.length ? <span class="meta">{message.headers.length} header{message.headers.length > 1 ? 's' : ''}</span> : null}
      </button>
      {message.value_decoded !== undefined ? (
        <>
          <pre class={`bytes ${open ? 'full' : 'preview'}`} data-field="value-decoded">
            {JSON.stringify(message.value_decoded, null, open ? 2 : undefined)}
          </pre>
          {open ? <span class="hint">decoded with schema id {message.value_schema_id} of the schema registry</span> : null}
        </>
      ) : <Bytes b64={message.value} size={message.value_size} view={view} full={open} name="value" />}
      {open ? (
        <div class="details">
          <h4>Key</h4>
          <Bytes b64={message.key} size={message.key_size} view={view} full name="key" />
          <h4>Headers</h4>
          {message.headers.length ? (
            <dl class="headers">
              {message.headers.map(([name, value], i) => (
                <div key={i}><dt>{name}</dt><dd><Bytes b64={value} size={null} view={view} full name="header" /></dd></div>
              ))}
            </dl>
          ) : <p class="muted">none</p>}
          <p class="muted">
            {message.timestamp_type || 'no timestamp'} {message.timestamp ?? ''} · value {formatBytes(message.value_size ?? 0)}
            {message.key_size !== null ? ` · key ${formatBytes(message.key_size)}` : ''}
          </p>
        </div>
      ) : null}
    </li>
  );
}

export function MessagesTab({ topic }) {
  const [partition, setPartition] = useState('');
  const [start, setStart] = useState('end');
  const [at, setAt] = useState('');
  const [limit, setLimit] = useState('100');
  const [filters, setFilters] = useState({ key: '', value: '', header: '' });
  const [view, setView] = useState('text');
  const [result, setResult] = useState(null);
  const [follow, setFollow] = useState(null); // {state, offsets, messages, outage}
  const search = useAction();
  const source = useRef(null);

  const stopFollowing = () => {
    if (source.current) source.current.close();
    source.current = null;
  };
  useEffect(() => stopFollowing, []);
  // Opening the tab shows the newest messages at once.
  useEffect(() => { browse(null); }, [topic.name]);

  const browse = async (resume) => {
    stopFollowing();
    setFollow(null);
    let startAt = '';
    if (!resume && start === 'offset') startAt = at.trim();
    if (!resume && start === 'timestamp') {
      const ms = parseTime(at);
      if (ms === null) {
        await search.run(async () => { throw new Error(`"${at}" is not a time: use 2024-05-01 12:00:00 or ms since the epoch`); });
        return;
      }
      startAt = ms;
    }
    const params = { partition, start: resume ? 'offset' : start, at: startAt, limit, ...filters,
      resume: resume ? Object.entries(resume).map(([p, o]) => `${p}:${o}`).join(',') : '' };
    const found = await search.run(() => api(`/api/topics/${enc(topic.name)}/messages${query(params)}`));
    if (found) setResult({ ...found, appended: resume && result ? [...result.appended, ...result.messages] : [] });
  };

  const startFollowing = () => {
    stopFollowing();
    setResult(null);
    search.clear();
    setFollow({ state: 'connecting', messages: [], outage: null, error: null });
    const events = new EventSource(`/api/topics/${enc(topic.name)}/follow${query({ partition, ...filters })}`);
    source.current = events;
    events.addEventListener('ready', (e) => {
      const { offsets } = JSON.parse(e.data);
      setFollow((f) => ({ ...f, state: 'ready', offsets, outage: null }));
    });
    events.addEventListener('message', (e) => {
      const message = JSON.parse(e.data);
      setFollow((f) => ({ ...f, outage: null, messages: [message, ...f.messages].slice(0, FOLLOW_KEEP) }));
    });
    events.addEventListener('outage', (e) => {
      setFollow((f) => ({ ...f, outage: JSON.parse(e.data).error }));
    });
    events.addEventListener('resumed', () => setFollow((f) => ({ ...f, outage: null })));
    events.addEventListener('failure', (e) => {
      events.close();
      setFollow((f) => ({ ...f, state: 'stopped', error: new Error(JSON.parse(e.data).error) }));
    });
    events.onerror = () => {
      if (events.readyState === EventSource.CLOSED) return;
      setFollow((f) => (f ? { ...f, outage: 'lost the connection to the console server; reconnecting…' } : f));
    };
  };

  const setFilter = (name) => (e) => setFilters({ ...filters, [name]: e.target.value });
  const following = follow && follow.state !== 'stopped';
  const shown = follow ? follow.messages : result ? [...result.appended, ...result.messages] : [];

  return (
    <div class="messages">
      <form class="panel form" data-form="browse" onSubmit={(e) => { e.preventDefault(); browse(null); }}>
        <div class="row">
          <Field label="Partition">
            <select name="partition" value={partition} onChange={(e) => setPartition(e.target.value)}>
              <option value="">All</option>
              {topic.partitions.map((p) => <option key={p.partition} value={p.partition}>{p.partition}</option>)}
            </select>
          </Field>
          <Field label="Start">
            <select name="start" value={start} onChange={(e) => setStart(e.target.value)}>
              <option value="end">Newest</option>
              <option value="beginning">Oldest</option>
              <option value="offset">Offset</option>
              <option value="timestamp">Time</option>
            </select>
          </Field>
          {start === 'offset' || start === 'timestamp' ? (
            <Field label={start === 'offset' ? 'Offset' : 'Time'} hint={start === 'timestamp' ? 'local, e.g. 2024-05-01 12:00:00, or ms' : 'in each partition'}>
              <input name="at" required value={at} inputmode={start === 'offset' ? 'numeric' : undefined}
                placeholder={start === 'offset' ? '0' : 'YYYY-MM-DD HH:MM:SS'} onInput={(e) => setAt(e.target.value)} />
            </Field>
          ) : null}
          <Field label="Limit">
            <select name="limit" value={limit} onChange={(e) => setLimit(e.target.value)}>
              {['20', '100', '500', '1000'].map((n) => <option key={n} value={n}>{n}</option>)}
            </select>
          </Field>
        </div>
        <div class="row">
          <Field label="Key contains"><input name="key" type="search" value={filters.key} onInput={setFilter('key')} /></Field>
          <Field label="Value contains"><input name="value" type="search" value={filters.value} onInput={setFilter('value')} /></Field>
          <Field label="Header contains"><input name="header" type="search" value={filters.header} onInput={setFilter('header')} /></Field>
        </div>
        <div class="buttons">
          <button class="primary" type="submit" data-action="search" disabled={search.busy}>{search.busy ? 'Reading…' : 'Show messages'}</button>
          {following
            ? <button type="button" data-action="stop-follow" onClick={() => { stopFollowing(); setFollow((f) => ({ ...f, state: 'stopped' })); }}>Stop following</button>
            : <button type="button" data-action="follow" onClick={startFollowing}>Follow live</button>}
          <span class="segmented" role="radiogroup" aria-label="Show keys and values as">
            {[['text', 'Text'], ['json', 'JSON'], ['hex', 'Hex']].map(([id, label]) => (
              <label key={id} class={view === id ? 'on' : ''}>
                <input type="radio" name="view" value={id} checked={view === id} onChange={() => setView(id)} />{label}
              </label>
            ))}
          </span>
        </div>
      </form>
      <ErrorBox error={search.error} />
      {follow ? (
        <div class="follow-status" data-follow={follow.state}>
          {follow.state === 'connecting' ? 'Connecting…' : null}
          {follow.state === 'ready' ? <>● Following from offsets {Object.entries(follow.offsets).map(([p, o]) => `P${p}:${o}`).join(', ')} — {follow.messages.length} new message{follow.messages.length === 1 ? '' : 's'}, newest first</> : null}
          {follow.state === 'stopped' ? `Stopped following; ${follow.messages.length} message${follow.messages.length === 1 ? '' : 's'} received.` : null}
          {follow.outage ? <div class="error" role="alert">{follow.outage}</div> : null}
          <ErrorBox error={follow.error} />
        </div>
      ) : null}
      {result ? (
        <p class="muted scan" data-scan={result.complete ? 'complete' : 'partial'}>
          {formatNumber(shown.length)} message{shown.length === 1 ? '' : 's'} shown, {formatNumber(result.scanned)} read
          {result.complete ? ' — reached the end of the log.' : ' — stopped at the limit or the time budget.'}
          {!result.complete && start !== 'end' ? <> <button type="button" class="link" data-action="more" onClick={() => browse(result.next)}>Load more</button></> : null}
        </p>
      ) : null}
      {result && !shown.length ? <Notice kind="info">No message matches.</Notice> : null}
      <ol class="message-list">
        {shown.map((m) => <MessageCard key={`${m.partition}-${m.offset}`} message={m} view={view} />)}
      </ol>
    </div>
  );
}
