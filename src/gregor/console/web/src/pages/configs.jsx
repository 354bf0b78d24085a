import { useState } from 'preact/hooks';
import { api, enc } from '../api.js';
import { useAction } from '../hooks.js';
import { Badge, ErrorBox, Notice, Table } from '../ui.jsx';

const SOURCES = {
  DYNAMIC_TOPIC_CONFIG: 'topic',
  DYNAMIC_BROKER_CONFIG: 'broker',
  DYNAMIC_DEFAULT_BROKER_CONFIG: 'cluster default',
  STATIC_BROKER_CONFIG: 'broker file',
  DEFAULT_CONFIG: 'default',
};

export function ConfigsTab({ topic, reload }) {
  const [edits, setEdits] = useState({});
  const [filter, setFilter] = useState('');
  const action = useAction();
  const names = Object.keys(topic.configs)
    .filter((name) => name.includes(filter.trim()))
    // The topic's own overrides first: they are what someone changed.
    .sort((a, b) => Number(topic.configs[b].override) - Number(topic.configs[a].override) || a.localeCompare(b));
  const changed = Object.entries(edits).filter(([name, value]) => value !== (topic.configs[name].value ?? ''));

  const save = async (set, remove) => {
    const done = await action.run(() => api(`/api/topics/${enc(topic.name)}/configs`,
      { method: 'PATCH', body: { set, delete: remove } }));
    if (done) {
      setEdits({});
      reload();
    }
  };
  return (
    <div class="configs">
      <div class="toolbar">
        <input type="search" placeholder="Filter configs" aria-label="Filter configs" value={filter} onInput={(e) => setFilter(e.target.value)} />
        <button class="primary" type="button" data-action="save-configs" disabled={!changed.length || action.busy}
          onClick={() => save(Object.fromEntries(changed), [])}>
          {action.busy ? 'Saving…' : `Save ${changed.length || ''} change${changed.length === 1 ? '' : 's'}`}
        </button>
      </div>
      <ErrorBox error={action.error} />
      {action.result ? <Notice>Saved.</Notice> : null}
      <Table name="configs">
        <thead><tr><th>Name</th><th>Value</th><th>Source</th><th /></tr></thead>
        <tbody>
          {names.map((name) => {
            const entry = topic.configs[name];
            const value = edits[name] ?? entry.value ?? '';
            return (
              <tr key={name} data-config={name} class={entry.override ? 'override' : ''}>
                <td class="config-name">{name}</td>
                <td>
                  {entry.read_only || entry.sensitive
                    ? <span class="muted">{entry.sensitive ? '(sensitive)' : entry.value}</span>
                    : <input aria-label={name} value={value} class={edits[name] !== undefined && value !== (entry.value ?? '') ? 'edited' : ''}
                      onInput={(e) => setEdits({ ...edits, [name]: e.target.value })} />}
                </td>
                <td>{entry.override ? <Badge kind="info">topic</Badge> : <span class="muted">{SOURCES[entry.source] || entry.source}</span>}</td>
                <td>{entry.override ? <button type="button" class="link" onClick={() => save({}, [name])}>reset to default</button> : null}</td>
              </tr>
            );
          })}
        </tbody>
      </Table>
    </div>
  );
}
