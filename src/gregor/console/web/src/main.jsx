import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api } from './api.js';
import { ClusterPage } from './pages/cluster.jsx';
import { GroupPage } from './pages/group.jsx';
import { GroupsPage } from './pages/groups.jsx';
import { SchemasPage, SubjectPage } from './pages/schemas.jsx';
import { TopicPage } from './pages/topic.jsx';
import { TopicsPage } from './pages/topics.jsx';
import './style.css';

// Hash routes (#/topics/orders/messages), so the server serves one page for all.
function useRoute() {
  const read = () => window.location.hash.replace(/^#/, '') || '/';
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const changed = () => {
      setRoute(read());
      window.scrollTo(0, 0);
    };
    window.addEventListener('hashchange', changed);
    return () => window.removeEventListener('hashchange', changed);
  }, []);
  return route.split('/').filter(Boolean).map(decodeURIComponent);
}

function page(parts, info) {
  const refresh = info.refresh_s;
  const [section, name, tab] = parts;
  if (section === 'topics' && name) return <TopicPage name={name} tab={tab || 'partitions'} refresh={refresh} />;
  if (section === 'topics') return <TopicsPage refresh={refresh} />;
  if (section === 'groups' && name) return <GroupPage id={name} refresh={refresh} />;
  if (section === 'groups') return <GroupsPage refresh={refresh} />;
  if (section === 'schemas' && name) return <SubjectPage subject={name} refresh={refresh} />;
  if (section === 'schemas') return <SchemasPage refresh={refresh} />;
  return <ClusterPage refresh={refresh} />;
}

function App() {
  const parts = useRoute();
  const [info, setInfo] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    api('/api/info').then(setInfo, setError);
  }, []);
  const section = parts[0] || 'cluster';
  const link = (href, label, id) => (
    <a href={href} class={section === id ? 'active' : ''} aria-current={section === id ? 'page' : undefined}>
      {label}
    </a>
  );
  return (
    <>
      <header class="top">
        <a class="brand" href="#/">gregor <span>console</span></a>
        <nav>
          {link('#/', 'Cluster', 'cluster')}
          {link('#/topics', 'Topics', 'topics')}
          {link('#/groups', 'Consumer groups', 'groups')}
          {info && info.schema_registry ? link('#/schemas', 'Schemas', 'schemas') : null}
        </nav>
        {info ? <span class="bootstrap" title="bootstrap servers">{info.bootstrap}</span> : null}
      </header>
      <main>
        {error ? <div class="error" role="alert">{error.message}</div> : null}
        {info ? page(parts, info) : null}
      </main>
    </>
  );
}

render(<App />, document.getElementById('app'));
