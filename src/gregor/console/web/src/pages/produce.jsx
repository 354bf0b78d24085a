import { useState } from 'preact/hooks';
import { api, enc } from '../api.js';
import { formatTime } from '../format.js';
import { useAction } from '../hooks.js';
import { ErrorBox, Field, Notice } from '../ui.jsx';

export function ProduceTab({ topic }) {
  const [partition, setPartition] = useState('');
  const [key, setKey] = useState('');
  const [value, setValue] = useState('');
  const [tombstone, setTombstone] = useState(false);
  const [headers, setHeaders] = useState([]);
  const action = useAction();

  const submit = async (event) => {
    event.preventDefault();
    await action.run(() => api(`/api/topics/${enc(topic.name)}/messages`, {
      method: 'POST',
      body: {
        partition: partition === '' ? null : Number(partition),
        key: key === '' ? null : key,
        value: tombstone ? null : value,
        headers: headers.filter(([name]) => name.trim()).map(([name, data]) => [name.trim(), data]),
      },
    }));
  };
  const setHeader = (index, column) => (e) => {
    const next = headers.map((h) => [...h]);
    next[index][column] = e.target.value;
    setHeaders(next);
  };
  return (
    <form class="panel form" data-form="produce" onSubmit={submit}>
      <div class="row">
        <Field label="Partition">
          <select name="partition" value={partition} onChange={(e) => setPartition(e.target.value)}>
            <option value="">Automatic (by key)</option>
            {topic.partitions.map((p) => <option key={p.partition} value={p.partition}>{p.partition}</option>)}
          </select>
        </Field>
        <Field label="Key" hint="empty: no key (null)">
          <input name="key" value={key} onInput={(e) => setKey(e.target.value)} autocomplete="off" />
        </Field>
      </div>
      <Field label="Value">
        <textarea name="value" rows="6" disabled={tombstone} value={value} onInput={(e) => setValue(e.target.value)}
          placeholder='{"id": 1}' />
      </Field>
      <label class="check"><input type="checkbox" name="tombstone" checked={tombstone} onChange={(e) => setTombstone(e.target.checked)} /> null value (a tombstone, for compacted topics)</label>
      <fieldset class="headers-editor">
        <legend>Headers</legend>
        {headers.map(([name, data], i) => (
          <div class="row header-row" key={i}>
            <input aria-label="Header name" name="header-name" placeholder="name" value={name} onInput={setHeader(i, 0)} />
            <input aria-label="Header value" name="header-value" placeholder="value" value={data} onInput={setHeader(i, 1)} />
            <button type="button" aria-label="Remove header" onClick={() => setHeaders(headers.filter((_, j) => j !== i))}>✕</button>
          </div>
        ))}
        <button type="button" data-action="add-header" onClick={() => setHeaders([...headers, ['', '']])}>Add header</button>
      </fieldset>
      <ErrorBox error={action.error} />
      {action.result ? (
        <Notice>
          <span data-produced={`${action.result.partition}:${action.result.offset}`}>
            Produced to partition {action.result.partition} at offset {action.result.offset}, {formatTime(action.result.timestamp)}.
          </span>
        </Notice>
      ) : null}
      <div class="buttons">
        <button class="primary" type="submit" disabled={action.busy}>{action.busy ? 'Producing…' : 'Produce'}</button>
      </div>
    </form>
  );
}
