import { useState } from 'preact/hooks';
import { api, enc } from '../api.js';
import { formatBytes, formatNumber } from '../format.js';
import { useAction, useResource } from '../hooks.js';
import { Badge, ConfirmButton, ErrorBox, Field, Loading, Notice, Stat, Table } from '../ui.jsx';
import { BrokerThroughput, Throughput } from './cluster.jsx';
import { ConfigsTab } from './configs.jsx';
import { MessagesTab } from './messages.jsx';
import { ProduceTab } from './produce.jsx';

const TABS = [['partitions', 'Partitions'], ['messages', 'Messages'], ['produce', 'Produce'], ['configs', 'Configs']];

function AddPartitions({ name, current, onDone }) {
  const [count, setCount] = useState('');
  const action = useAction();
  const submit = async (event) => {
    event.preventDefault();
    const done = await action.run(() => api(`/api/topics/${enc(name)}/partitions`,
      { method: 'POST', body: { count: Number(count) } }));
    if (done) onDone();
  };
  return (
    <form class="inline-form" data-form="add-partitions" onSubmit={submit}>
      <Field label="Partitions" hint={`now ${current}; Kafka can only add partitions`}>
        <input name="count" type="number" min={current + 1} required value={count} onInput={(e) => setCount(e.target.value)} />
      </Field>
      <button type="submit" disabled={action.busy}>{action.busy ? 'Adding…' : 'Add partitions'}</button>
      <ErrorBox error={action.error} />
      {action.result ? <Notice>The topic now has {action.result.partitions} partitions.</Notice> : null}
    </form>
  );
}

function PartitionsTab({ topic, reload }) {
  const deletion = useAction();
  const [deleted, setDeleted] = useState(false);
  const remove = async () => {
    const done = await deletion.run(() => api(`/api/topics/${enc(topic.name)}`, { method: 'DELETE' }));
    if (done) setDeleted(true);
  };
  if (deleted) {
    return <Notice>Deleted topic {topic.name}. <a href="#/topics">Back to topics</a></Notice>;
  }
  return (
    <>
      <Table name="partitions">
        <thead><tr><th class="num">Partition</th><th class="num">Leader</th><th>Replicas</th><th>In-sync replicas</th>
          <th class="num">Log start</th><th class="num">Log end</th><th class="num">Records</th>
          {topic.metrics ? <th class="num">Size</th> : null}</tr></thead>
        <tbody>
          {topic.partitions.map((p) => (
            <tr key={p.partition} data-partition={p.partition}>
              <td class="num">{p.partition}</td>
              <td class="num">{p.leader ?? <Badge kind="bad">offline</Badge>}</td>
              <td>{p.replicas.join(', ')}{p.offline_replicas.length ? <Badge kind="bad">{p.offline_replicas.join(', ')} down</Badge> : null}</td>
              <td>{p.isr.join(', ')}{p.leader !== null && p.isr.length < p.replicas.length ? <Badge kind="warn">under-replicated</Badge> : null}</td>
              <td class="num">{formatNumber(p.log_start)}</td>
              <td class="num">{formatNumber(p.log_end)}</td>
              <td class="num">{p.log_end === null ? '–' : formatNumber(p.log_end - p.log_start)}</td>
              {topic.metrics ? <td class="num" data-size={p.size ?? ''}>{formatBytes(p.size)}</td> : null}
            </tr>
          ))}
        </tbody>
      </Table>
      {topic.metrics ? <p class="muted note" data-note="size">{topic.size_note}</p> : null}
      <BrokerThroughput view={topic} />
      <Throughput rate={topic.rate} />
      <section class="panel">
        <h2>Manage</h2>
        <AddPartitions name={topic.name} current={topic.partitions.length} onDone={reload} />
        <div class="danger-zone">
          <ConfirmButton name="delete-topic" label="Delete topic…" confirmLabel="Delete it"
            question={`Delete ${topic.name} and all its records?`} busy={deletion.busy} onConfirm={remove} />
          <ErrorBox error={deletion.error} />
        </div>
      </section>
    </>
  );
}

export function TopicPage({ name, tab, refresh }) {
  // Messages and produce do not need the page refreshed under them.
  const live = tab === 'partitions' ? refresh : null;
  const { data, error, loading, reload } = useResource(`/api/topics/${enc(name)}`, live);
  const sizes = data ? data.partitions.filter((p) => p.size !== null).map((p) => p.size) : [];
  const size = sizes.length ? sizes.reduce((sum, s) => sum + s, 0) : null;
  const records = data ? data.partitions.reduce((sum, p) => sum + (p.log_end === null ? 0 : p.log_end - p.log_start), 0) : null;
  return (
    <div class="page" data-page="topic">
      <p class="crumbs"><a href="#/topics">Topics</a> /</p>
      <h1 class="topic-name">{name} {data && data.internal ? <Badge>internal</Badge> : null}</h1>
      <ErrorBox error={error} prefix={data ? 'Showing the last answer:' : null} />
      {loading && !data ? <Loading what="the topic" /> : null}
      {data ? (
        <>
          <div class="stats">
            <Stat name="partitions" label="Partitions" value={data.partitions.length} />
            <Stat name="replicas" label="Replication factor" value={Math.max(0, ...data.partitions.map((p) => p.replicas.length))} />
            <Stat name="records" label="Records" value={formatNumber(records)} />
            <Stat name="offline" label="Offline" value={data.partitions.filter((p) => p.leader === null).length} />
            {data.metrics ? <Stat name="size" label="Size" value={formatBytes(size)} /> : null}
          </div>
          <nav class="tabs" role="tablist">
            {TABS.map(([id, label]) => (
              <a key={id} role="tab" href={`#/topics/${enc(name)}/${id}`} class={tab === id ? 'active' : ''}
                aria-selected={tab === id}>{label}</a>
            ))}
          </nav>
          {tab === 'partitions' ? <PartitionsTab topic={data} reload={reload} /> : null}
          {tab === 'messages' ? <MessagesTab topic={data} /> : null}
          {tab === 'produce' ? <ProduceTab topic={data} /> : null}
          {tab === 'configs' ? <ConfigsTab topic={data} reload={reload} /> : null}
        </>
      ) : null}
    </div>
  );
}
