import { useState } from 'preact/hooks';
import { api, enc, query } from '../api.js';
import { Chart } from '../chart.jsx';
import { formatNumber, parseTime } from '../format.js';
import { useAction, useResource } from '../hooks.js';
import { ConfirmButton, ErrorBox, Field, Loading, Notice, Stat, Table } from '../ui.jsx';
import { STATE_KIND } from './groups.jsx';

// The chart stays readable with this many lines; more partitions show their total.
const MAX_SERIES = 8;

function LagChart({ history }) {
  const names = Object.keys(history.series);
  if (history.t.length < 2 || !names.length) {
    return <p class="muted">Sampling committed offsets; the chart appears after two samples.</p>;
  }
  const total = history.t.map((_, i) => {
    const values = names.map((n) => history.series[n][i]).filter((v) => v !== null);
    return values.length ? values.reduce((a, b) => a + b, 0) : null;
  });
  const series = names.length <= MAX_SERIES
    ? names.map((n) => ({ label: n, values: history.series[n] }))
    : [{ label: `total of ${names.length} partitions`, values: total }];
  return <Chart times={history.t} series={series} label="lag (records)" />;
}

function ResetOffsets({ group, onDone }) {
  const groupTopics = [...new Set(group.partitions.map((p) => p.topic))];
  const [topics, setTopics] = useState(groupTopics.join(', '));
  const [to, setTo] = useState('earliest');
  const [value, setValue] = useState('');
  const action = useAction();

  const run = (execute) => action.run(async () => {
    let number = 0;
    if (to === 'timestamp') {
      number = parseTime(value);
      if (number === null) throw new Error(`"${value}" is not a time: use 2024-05-01 12:00:00 or ms since the epoch`);
    } else if (to === 'offset' || to === 'shift') {
      if (!/^-?\d+$/.test(value.trim())) throw new Error(`"${value}" is not a whole number`);
      number = Number(value);
    }
    // "orders:0,2, audit": a comma before a digit lists partitions, any other separates topics.
    const specs = topics.split(/\s*,\s*(?=[^\d\s])|\s+/).filter(Boolean);
    const result = await api(`/api/group/reset${query({ id: group.id })}`, {
      method: 'POST', body: { topics: specs, to, value: number, execute },
    });
    if (execute) onDone();
    return result;
  });

  return (
    <form class="panel form" data-form="reset" onSubmit={(e) => { e.preventDefault(); run(false); }}>
      <h2>Reset offsets</h2>
      <p class="muted">Only while the group has no members, as with <code>gregor groups reset-offsets</code>: running consumers would overwrite the new offsets.</p>
      <div class="row">
        <Field label="Topics" hint="comma-separated; orders:0,2 for some partitions">
          <input name="topics" value={topics} onInput={(e) => setTopics(e.target.value)} />
        </Field>
        <Field label="To">
          <select name="to" value={to} onChange={(e) => setTo(e.target.value)}>
            <option value="earliest">Earliest (log start)</option>
            <option value="latest">Latest (log end)</option>
            <option value="timestamp">A time</option>
            <option value="offset">An offset</option>
            <option value="shift">Shift by</option>
          </select>
        </Field>
        {to === 'timestamp' || to === 'offset' || to === 'shift' ? (
          <Field label={to === 'timestamp' ? 'Time' : to === 'offset' ? 'Offset' : 'Shift by (±N)'}>
            <input name="value" required value={value} onInput={(e) => setValue(e.target.value)}
              placeholder={to === 'timestamp' ? 'YYYY-MM-DD HH:MM:SS' : '0'} />
          </Field>
        ) : null}
      </div>
      <div class="buttons">
        <button type="submit" data-action="dry-run" disabled={action.busy}>Preview (dry run)</button>
        <button type="button" class="primary" data-action="reset" disabled={action.busy} onClick={() => run(true)}>Reset offsets</button>
      </div>
      <ErrorBox error={action.error} />
      {action.result ? (
        <div data-reset={action.result.executed ? 'executed' : 'dry-run'}>
          <Notice kind={action.result.executed ? 'ok' : 'info'}>
            {action.result.executed ? 'Offsets reset:' : 'Dry run, nothing changed. These offsets would be committed:'}
          </Notice>
          <Table name="reset">
            <thead><tr><th>Topic</th><th class="num">Partition</th><th class="num">Committed</th><th class="num">New offset</th></tr></thead>
            <tbody>
              {action.result.offsets.map((r) => (
                <tr key={`${r.topic}-${r.partition}`}>
                  <td>{r.topic}</td><td class="num">{r.partition}</td>
                  <td class="num">{formatNumber(r.previous)}</td><td class="num" data-field="new-offset">{formatNumber(r.offset)}</td>
                </tr>
              ))}
            </tbody>
          </Table>
        </div>
      ) : null}
    </form>
  );
}

export function GroupPage({ id, refresh }) {
  const { data, error, loading, reload } = useResource(`/api/group${query({ id })}`, refresh);
  const deletion = useAction();
  const [deleted, setDeleted] = useState(false);
  if (deleted) {
    return <div class="page"><Notice>Deleted consumer group {id}. <a href="#/groups">Back to groups</a></Notice></div>;
  }
  const lag = data ? data.partitions.reduce((sum, p) => sum + Math.max(p.lag ?? 0, 0), 0) : null;
  return (
    <div class="page" data-page="group">
      <p class="crumbs"><a href="#/groups">Consumer groups</a> /</p>
      <h1 class="group-name">{id}</h1>
      <ErrorBox error={error} prefix={data ? 'Showing the last answer:' : null} />
      {loading && !data ? <Loading what="the group" /> : null}
      {data ? (
        <>
          <div class="stats">
            <Stat name="state" label="State" value={data.state} kind={STATE_KIND[data.state]} />
            <Stat name="members" label="Members" value={data.members.length} />
            <Stat name="lag" label="Total lag" value={formatNumber(lag)} kind={lag ? 'warn' : 'good'} />
            <Stat name="coordinator" label="Coordinator" value={data.coordinator} />
            <Stat name="assignor" label="Assignor" value={data.assignor || '–'} />
          </div>
          <section class="panel">
            <h2>Lag over time</h2>
            <LagChart history={data.history} />
          </section>
          <section>
            <h2>Partitions</h2>
            <Table name="group-partitions">
              {/* Lag first: on a phone the columns after it are a scroll away. */}
              <thead><tr><th>Topic</th><th class="num">Partition</th><th class="num">Lag</th><th class="num">Committed</th>
                <th class="num">Log end</th><th class="num">Lead</th><th class="num">Log start</th><th>Member</th></tr></thead>
              <tbody>
                {data.partitions.map((p) => (
                  <tr key={`${p.topic}-${p.partition}`} data-partition={`${p.topic}:${p.partition}`}>
                    <td><a href={`#/topics/${enc(p.topic)}`}>{p.topic}</a></td>
                    <td class="num">{p.partition}</td>
                    <td class="num" data-field="lag">{formatNumber(p.lag)}</td>
                    <td class="num" data-field="committed">{formatNumber(p.committed)}</td>
                    <td class="num">{formatNumber(p.log_end)}</td>
                    <td class="num" data-field="lead">{formatNumber(p.lead)}</td>
                    <td class="num">{formatNumber(p.log_start)}</td>
                    <td>{p.client_id || '–'}</td>
                  </tr>
                ))}
              </tbody>
            </Table>
          </section>
          <section>
            <h2>Members</h2>
            {data.members.length ? (
              <Table name="members">
                <thead><tr><th>Client</th><th>Host</th><th>Assignment</th><th>Member id</th></tr></thead>
                <tbody>
                  {data.members.map((m) => (
                    <tr key={m.member_id}>
                      <td>{m.client_id}</td><td>{m.host}</td><td>{m.assignment}</td><td class="muted small">{m.member_id}</td>
                    </tr>
                  ))}
                </tbody>
              </Table>
            ) : <p class="muted">No active members.</p>}
          </section>
          <ResetOffsets group={data} onDone={reload} />
          <section class="panel danger-zone">
            <h2>Delete</h2>
            <ConfirmButton name="delete-group" label="Delete group…" confirmLabel="Delete it"
              question={`Delete ${id} and its committed offsets?`} busy={deletion.busy}
              onConfirm={async () => { if (await deletion.run(() => api(`/api/group${query({ id })}`, { method: 'DELETE' }))) setDeleted(true); }} />
            <ErrorBox error={deletion.error} />
          </section>
        </>
      ) : null}
    </div>
  );
}
