import { useState } from 'preact/hooks';
import { formatNumber } from '../format.js';
import { useResource } from '../hooks.js';
import { ErrorBox, Loading, Table } from '../ui.jsx';

export const STATE_KIND = {
  Stable: 'good', Empty: 'neutral', PreparingRebalance: 'warn', CompletingRebalance: 'warn', Dead: 'bad',
};

export function GroupsPage({ refresh }) {
  const { data, error, loading } = useResource('/api/groups', refresh);
  const [filter, setFilter] = useState('');
  const rows = data ? data.groups.filter((g) => g.id.toLowerCase().includes(filter.toLowerCase())) : [];
  return (
    <div class="page" data-page="groups">
      <h1>Consumer groups {data ? <span class="count">{data.groups.length}</span> : null}</h1>
      <ErrorBox error={error} prefix={data ? 'Showing the last answer:' : null} />
      {loading && !data ? <Loading what="consumer groups" /> : null}
      {data ? (
        <>
          <div class="toolbar">
            <input type="search" placeholder="Filter by group id" aria-label="Filter groups" value={filter} onInput={(e) => setFilter(e.target.value)} />
          </div>
          <Table name="groups">
            <thead><tr><th>Group</th><th>State</th><th class="num">Members</th><th>Topics</th><th class="num">Lag</th></tr></thead>
            <tbody>
              {rows.map((g) => (
                <tr key={g.id} data-group={g.id}>
                  <td><a href={`#/groups/${encodeURIComponent(g.id)}`}>{g.id}</a></td>
                  <td><span class={`badge ${STATE_KIND[g.state] || 'neutral'}`}>{g.state}</span></td>
                  <td class="num">{g.members}</td>
                  <td>{g.topics.join(', ') || '–'}</td>
                  <td class="num" data-field="lag">{formatNumber(g.lag)}</td>
                </tr>
              ))}
            </tbody>
          </Table>
          {!rows.length ? <p class="muted">No consumer group{filter ? ' matches the filter' : ''}.</p> : null}
        </>
      ) : null}
    </div>
  );
}
