import { useState } from 'preact/hooks';
import { enc, query } from '../api.js';
import { useResource } from '../hooks.js';
import { Badge, ErrorBox, Field, Loading, Table } from '../ui.jsx';

// The registry's subjects (gregor console --schema-registry URL), each with its latest version.
export function SchemasPage({ refresh }) {
  const { data, error, loading } = useResource('/api/subjects', refresh);
  const [filter, setFilter] = useState('');
  const rows = data ? data.subjects.filter((s) => s.subject.toLowerCase().includes(filter.toLowerCase())) : [];
  return (
    <div class="page" data-page="schemas">
      <h1>Schemas {data ? <span class="count">{data.subjects.length}</span> : null}</h1>
      <ErrorBox error={error} prefix={data ? 'Showing the last answer:' : null} />
      {loading && !data ? <Loading what="subjects" /> : null}
      {data ? (
        <>
          <div class="toolbar">
            <input type="search" placeholder="Filter by subject" aria-label="Filter subjects" value={filter} onInput={(e) => setFilter(e.target.value)} />
          </div>
          <Table name="subjects">
            <thead><tr><th>Subject</th><th>Type</th><th class="num">Latest version</th><th class="num">Schema id</th></tr></thead>
            <tbody>
              {rows.map((s) => (
                <tr key={s.subject} data-subject={s.subject}>
                  <td><a href={`#/schemas/${enc(s.subject)}`}>{s.subject}</a></td>
                  <td><Badge kind="info">{s.type}</Badge></td>
                  <td class="num">{s.version}</td>
                  <td class="num">{s.id}</td>
                </tr>
              ))}
            </tbody>
          </Table>
          {!rows.length ? <p class="muted">No subject{filter ? ' matches the filter' : ''}.</p> : null}
        </>
      ) : null}
    </div>
  );
}

// One subject: its versions, the schema of the one chosen, and what changed between two.
export function SubjectPage({ subject, refresh }) {
  const { data, error, loading } = useResource(`/api/subjects/${enc(subject)}`, refresh);
  const versions = data ? data.versions : [];
  const latest = versions.length ? versions[versions.length - 1].version : null;
  const [chosen, setChosen] = useState(null);
  const [from, setFrom] = useState(null);
  const shown = versions.find((v) => v.version === (chosen ?? latest));
  const older = from ?? (versions.length > 1 ? versions[versions.length - 2].version : latest);
  const to = chosen ?? latest;
  return (
    <div class="page" data-page="subject">
      <h1><a href="#/schemas">Schemas</a> / {subject}</h1>
      <ErrorBox error={error} prefix={data ? 'Showing the last answer:' : null} />
      {loading && !data ? <Loading what="the subject" /> : null}
      {data ? (
        <>
          <p class="muted">Compatibility <Badge kind="info">{data.compatibility}</Badge> · {versions.length} version{versions.length === 1 ? '' : 's'}</p>
          <Table name="versions">
            <thead><tr><th class="num">Version</th><th class="num">Schema id</th><th>Type</th><th>References</th></tr></thead>
            <tbody>
              {versions.map((v) => (
                <tr key={v.version} data-version={v.version} class={v === shown ? 'selected' : ''}>
                  <td class="num"><button type="button" class="link" onClick={() => setChosen(v.version)}>{v.version}</button></td>
                  <td class="num">{v.id}</td>
                  <td>{v.type}</td>
                  <td>{v.references.map((r) => `${r.name} → ${r.subject} v${r.version}`).join(', ') || '–'}</td>
                </tr>
              ))}
            </tbody>
          </Table>
          {shown ? (
            <>
              <h2>Version {shown.version}</h2>
              <pre class="bytes full" data-field="schema">{shown.schema}</pre>
            </>
          ) : null}
          {versions.length > 1 && to !== null ? (
            <>
              <h2>Changes</h2>
              <div class="row">
                <Field label="From version">
                  <select name="diff-from" value={older} onChange={(e) => setFrom(Number(e.target.value))}>
                    {versions.map((v) => <option key={v.version} value={v.version}>{v.version}</option>)}
                  </select>
                </Field>
                <span class="muted">to version {to}</span>
              </div>
              <Diff subject={subject} from={older} to={to} />
            </>
          ) : null}
        </>
      ) : null}
    </div>
  );
}

function Diff({ subject, from, to }) {
  const { data, error } = useResource(`/api/subjects/${enc(subject)}/diff${query({ from, to })}`);
  if (error) return <ErrorBox error={error} />;
  if (!data) return <Loading what="the changes" />;
  if (!data.diff.length) return <p class="muted">No change.</p>;
  return (
    <pre class="bytes full diff" data-field="diff">
      {data.diff.map((line, i) => {
        const kind = line.startsWith('+') && !line.startsWith('+++') ? 'added'
          : line.startsWith('-') && !line.startsWith('---') ? 'removed' : '';
        return <span key={i} class={kind}>{line}{'\n'}</span>;
      })}
    </pre>
  );
}
