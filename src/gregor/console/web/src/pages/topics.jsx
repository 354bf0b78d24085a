import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { formatBytes, formatMs, formatNumber, formatRate, formatSize } from '../format.js';
import { useAction, useResource } from '../hooks.js';
import { Badge, ErrorBox, Field, Loading, Notice, Table } from '../ui.jsx';
import { MetricsStatus } from './cluster.jsx';

// "name=value" per line, as in a server.properties file.
export function parseConfigs(text) {
  const configs = {};
  for (const line of text.split('\n')) {
    const trimmed = line.trim();
    if (!trimmed || trimmed.startsWith('#')) continue;
    const at = trimmed.indexOf('=');
    if (at <= 0) throw new Error(`expected name=value, got "${trimmed}"`);
    configs[trimmed.slice(0, at).trim()] = trimmed.slice(at + 1).trim();
  }
  return configs;
}

function CreateTopic({ onCreated }) {
  const [open, setOpen] = useState(false);
  const [name, setName] = useState('');
  const [partitions, setPartitions] = useState('');
  const [replicas, setReplicas] = useState('');
  const [configs, setConfigs] = useState('');
  const action = useAction();
  if (!open) {
    return <button type="button" class="primary" data-action="new-topic" onClick={() => setOpen(true)}>New topic</button>;
  }
  const submit = async (event) => {
    event.preventDefault();
    const created = await action.run(async () => {
      const body = {
        name: name.trim(),
        partitions: partitions ? Number(partitions) : -1,
        replication_factor: replicas ? Number(replicas) : -1,
        configs: parseConfigs(configs),
      };
      return api('/api/topics', { method: 'POST', body });
    });
    if (created) {
      setName('');
      onCreated(created.created);
    }
  };
  return (
    <form class="panel form" data-form="create-topic" onSubmit={submit}>
      <h2>New topic</h2>
      <div class="row">
        <Field label="Name"><input name="name" required value={name} onInput={(e) => setName(e.target.value)} autocomplete="off" /></Field>
        <Field label="Partitions" hint="empty: the broker's num.partitions">
          <input name="partitions" type="number" min="1" value={partitions} onInput={(e) => setPartitions(e.target.value)} />
        </Field>
        <Field label="Replication factor" hint="empty: the broker's default">
          <input name="replication_factor" type="number" min="1" value={replicas} onInput={(e) => setReplicas(e.target.value)} />
        </Field>
      </div>
      <Field label="Configs" hint="name=value per line, e.g. retention.ms=86400000">
        <textarea name="configs" rows="3" value={configs} onInput={(e) => setConfigs(e.target.value)} />
      </Field>
      <ErrorBox error={action.error} />
      <div class="buttons">
        <button class="primary" type="submit" disabled={action.busy}>{action.busy ? 'Creating…' : 'Create topic'}</button>
        <button type="button" onClick={() => { setOpen(false); action.clear(); }}>Cancel</button>
      </div>
    </form>
  );
}

export function TopicsPage({ refresh }) {
  const { data, error, loading, reload } = useResource('/api/topics', refresh);
  const [filter, setFilter] = useState('');
  const [internal, setInternal] = useState(false);
  const [created, setCreated] = useState(null);
  const rows = data ? data.topics.filter((t) => (internal || !t.internal)
    && t.name.toLowerCase().includes(filter.toLowerCase())) : [];
  return (
    <div class="page" data-page="topics">
      <div class="title-row">
        <h1>Topics {data ? <span class="count">{data.topics.length}</span> : null}</h1>
        <CreateTopic onCreated={(name) => { setCreated(name); reload(); }} />
      </div>
      {created ? <Notice>Created topic <a href={`#/topics/${encodeURIComponent(created)}`}>{created}</a>.</Notice> : null}
      <ErrorBox error={error} prefix={data ? 'Showing the last answer:' : null} />
      {loading && !data ? <Loading what="topics" /> : null}
      {data ? (
        <>
          <div class="toolbar">
            <input type="search" placeholder="Filter by name" aria-label="Filter topics by name" value={filter}
              onInput={(e) => setFilter(e.target.value)} />
            <label class="check"><input type="checkbox" checked={internal} onChange={(e) => setInternal(e.target.checked)} /> internal topics</label>
          </div>
          <Table name="topics">
            <thead>
              <tr><th>Name</th><th class="num">Partitions</th><th class="num">Replicas</th>
                <th class="num">Records</th><th class="num">Msg/s</th><th>Retention</th><th>Cleanup</th><th>Size</th></tr>
            </thead>
            <tbody>
              {rows.map((t) => (
                <tr key={t.name} data-topic={t.name}>
                  <td>
                    <a href={`#/topics/${encodeURIComponent(t.name)}`}>{t.name}</a>
                    {t.internal ? <Badge>internal</Badge> : null}
                    {t.offline ? <Badge kind="bad">{t.offline} offline</Badge> : null}
                    {t.under_replicated ? <Badge kind="warn">{t.under_replicated} under-replicated</Badge> : null}
                  </td>
                  <td class="num">{t.partitions}</td>
                  <td class="num">{t.replication_factor}</td>
                  <td class="num">{formatNumber(t.records)}</td>
                  <td class="num">{formatRate(t.rate)}</td>
                  <td>{formatMs(t['retention.ms'])}{t['retention.bytes'] && Number(t['retention.bytes']) >= 0 ? ` / ${formatSize(t['retention.bytes'])}` : ''}</td>
                  <td>{t['cleanup.policy'] || '–'}</td>
                  {data.metrics
                    ? <td class="num" data-size={t.size ?? ''}>{formatBytes(t.size)}</td>
                    : <td class="muted" title={data.size_note}>n/a</td>}
                </tr>
              ))}
            </tbody>
          </Table>
          {!rows.length ? <p class="muted">No topic{filter ? ' matches the filter' : ''}.</p> : null}
          <p class="muted note" data-note="size">{data.size_note} Msg/s is measured from log end offsets over the last minute.</p>
          <MetricsStatus status={data.metrics} />
        </>
      ) : null}
    </div>
  );
}
