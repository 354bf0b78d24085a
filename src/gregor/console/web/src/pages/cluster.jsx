import { Chart } from '../chart.jsx';
import { formatByteRate, formatBytes, formatRate } from '../format.js';
import { useResource } from '../hooks.js';
import { ErrorBox, Loading, Notice, Stat, Table } from '../ui.jsx';

function PartitionRows({ rows }) {
  return rows.map((p) => (
    <tr key={`${p.topic}-${p.partition}`}>
      <td><a href={`#/topics/${encodeURIComponent(p.topic)}`}>{p.topic}</a></td>
      <td class="num">{p.partition}</td>
      <td class="num">{p.leader ?? 'none'}</td>
      <td>{p.replicas.join(', ')}</td>
      <td>{p.isr.join(', ') || 'empty'}</td>
      <td>{p.offline_replicas.join(', ') || '–'}</td>
    </tr>
  ));
}

function Unhealthy({ title, rows, name }) {
  return (
    <section>
      <h2>{title} <span class="count">{rows.length}</span></h2>
      <Table name={name}>
        <thead><tr><th>Topic</th><th class="num">Partition</th><th class="num">Leader</th>
          <th>Replicas</th><th>In-sync replicas</th><th>Offline replicas</th></tr></thead>
        <tbody><PartitionRows rows={rows} /></tbody>
      </Table>
    </section>
  );
}

export function Throughput({ rate, title = 'Messages in per second' }) {
  const last = rate.messages_in.length ? rate.messages_in[rate.messages_in.length - 1] : null;
  return (
    <section class="panel">
      <h2>{title} <span class="count">{formatRate(last)} now</span></h2>
      {rate.t.length > 1
        ? <Chart times={rate.t} series={[{ label: 'messages/s', values: rate.messages_in }]} label="messages/s" />
        : <p class="muted">Sampling log end offsets; the chart appears after two samples.</p>}
    </section>
  );
}

const last = (values) => (values.length ? values[values.length - 1] : null);

// Which brokers' metrics the numbers come from; the ones that did not answer, and why.
export function MetricsStatus({ status }) {
  if (!status) return null;
  if (!status.scraped) return <p class="muted note" data-note="metrics">Scraping the brokers' metrics…</p>;
  if (!status.errors.length) {
    return <p class="muted note" data-note="metrics">From the Prometheus metrics of {status.answering} of {status.endpoints} brokers.</p>;
  }
  return (
    <Notice kind="warn">
      <span data-note="metrics-missing">
        Metrics answered by {status.answering} of {status.endpoints} brokers; rates and sizes leave out
        {status.errors.map((e) => <span key={e.url}> {e.url} ({e.error})</span>)}.
      </span>
    </Notice>
  );
}

// Bytes in and out per second from the brokers' metrics: now and over the history
// window; the reason there are none when metrics are not configured. (Messages in per
// second are charted from log end offsets, which need no metrics.)
export function BrokerThroughput({ view, title = 'Bytes in and out per second' }) {
  if (!view.bytes) return <p class="muted note" data-note="metrics">{view.bytes_note}</p>;
  const { t, bytes_in: bytesIn, bytes_out: bytesOut } = view.bytes;
  return (
    <section class="panel" data-panel="bytes">
      <h2>{title}</h2>
      <div class="stats">
        <Stat name="bytes-in" label="Bytes in now" value={formatByteRate(last(bytesIn))} />
        <Stat name="bytes-out" label="Bytes out now" value={formatByteRate(last(bytesOut))} />
      </div>
      {t.length > 1
        ? <Chart times={t} series={[{ label: 'in', values: bytesIn }, { label: 'out', values: bytesOut }]}
            label="bytes/s" format={formatByteRate} />
        : <p class="muted">Scraping the brokers' metrics; the chart appears after two scrapes.</p>}
      <MetricsStatus status={view.metrics} />
    </section>
  );
}

// Partition reassignments in progress: who is added and removed, bytes moved and left
// (the new replicas against their leader's size on disk) and the rate since the last look.
function Reassignments({ rows, note }) {
  if (rows === null) return <p class="muted note" data-note="reassignments">{note}</p>;
  return (
    <section data-panel="reassignments">
      <h2>Reassignments in progress <span class="count">{rows.length}</span></h2>
      {rows.length ? (
        <Table name="reassignments">
          <thead><tr><th>Topic</th><th class="num">Partition</th><th>Replicas</th><th>Adding</th>
            <th>Removing</th><th class="num">Moved</th><th class="num">Left</th><th class="num">Rate</th></tr></thead>
          <tbody>
            {rows.map((r) => (
              <tr key={`${r.topic}-${r.partition}`}>
                <td><a href={`#/topics/${encodeURIComponent(r.topic)}`}>{r.topic}</a></td>
                <td class="num">{r.partition}</td>
                <td>{r.replicas.join(', ')}</td>
                <td>{r.adding.join(', ') || '–'}</td>
                <td>{r.removing.join(', ') || '–'}</td>
                <td class="num">{formatBytes(r.moved)}</td>
                <td class="num">{formatBytes(r.left)}</td>
                <td class="num">{r.rate === null ? '–' : formatByteRate(r.rate)}</td>
              </tr>
            ))}
          </tbody>
        </Table>
      ) : <p class="muted">No partition is being moved.</p>}
    </section>
  );
}

export function ClusterPage({ refresh }) {
  const { data, error, loading } = useResource('/api/cluster', refresh);
  return (
    <div class="page" data-page="cluster">
      <h1>Cluster {data ? <small class="muted">{data.cluster_id}</small> : null}</h1>
      <ErrorBox error={error} prefix={data ? 'Showing the last answer:' : null} />
      {loading && !data ? <Loading what="the cluster" /> : null}
      {data ? (
        <>
          <div class="stats">
            <Stat name="brokers" label="Brokers" value={data.brokers.length} />
            <Stat name="controller" label="Controller" value={data.controller ?? 'none'} kind={data.controller === null ? 'bad' : ''} />
            <Stat name="topics" label="Topics" value={data.topics} />
            <Stat name="partitions" label="Partitions" value={data.partitions} />
            <Stat name="under-replicated" label="Under-replicated" value={data.under_replicated.length}
              kind={data.under_replicated.length ? 'warn' : 'good'} />
            <Stat name="offline" label="Offline partitions" value={data.offline.length}
              kind={data.offline.length ? 'bad' : 'good'} />
          </div>
          <section>
            <h2>Brokers</h2>
            <Table name="brokers">
              <thead><tr><th class="num">ID</th><th>Address</th><th>Rack</th><th>Role</th></tr></thead>
              <tbody>
                {data.brokers.map((b) => (
                  <tr key={b.id}>
                    <td class="num">{b.id}</td>
                    <td>{b.host}:{b.port}</td>
                    <td>{b.rack || '–'}</td>
                    <td>{b.controller ? <span class="badge good">controller</span> : 'broker'}</td>
                  </tr>
                ))}
              </tbody>
            </Table>
          </section>
          {data.offline.length ? <Unhealthy title="Offline partitions" rows={data.offline} name="offline" /> : null}
          {data.under_replicated.length
            ? <Unhealthy title="Under-replicated partitions" rows={data.under_replicated} name="under-replicated" />
            : null}
          {!data.offline.length && !data.under_replicated.length
            ? <Notice>Every partition has a leader and a full set of in-sync replicas.</Notice> : null}
          <Reassignments rows={data.reassignments} note={data.reassignments_note} />
          <BrokerThroughput view={data.throughput} />
          <Throughput rate={data.throughput.messages_in} />
        </>
      ) : null}
    </div>
  );
}
