import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { api } from './api.js';

// Data behind a page: loaded at once, then again every `refreshS` seconds (if given)
// while the page is open. A failed refresh keeps the last data and shows the error.
export function useResource(path, refreshS) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const generation = useRef(0);

  const load = useCallback(async () => {
    const mine = ++generation.current;
    try {
      const data = await api(path);
      if (mine === generation.current) setState({ data, error: null, loading: false });
    } catch (error) {
      if (mine === generation.current) {
        setState((old) => ({ data: old.data, error, loading: false }));
      }
    }
  }, [path]);

  // Another resource starts afresh; another refresh period (a tab that needs no
  // refreshing) keeps what is shown.
  useEffect(() => {
    setState({ data: null, error: null, loading: true });
    load();
  }, [load]);

  useEffect(() => {
    if (!refreshS) return undefined;
    // Wait for an answer before asking again: a broker that is down makes answers slow.
    let stopped = false;
    let timer;
    const tick = async () => {
      await load();
      if (!stopped) timer = setTimeout(tick, refreshS * 1000);
    };
    timer = setTimeout(tick, refreshS * 1000);
    return () => {
      stopped = true;
      clearTimeout(timer);
      generation.current += 1;
    };
  }, [path, refreshS, load]);

  return { ...state, reload: load };
}

// An action started from a form: busy while it runs, its result or error after.
export function useAction() {
  const [state, setState] = useState({ busy: false, error: null, result: null });
  const run = useCallback(async (action) => {
    setState({ busy: true, error: null, result: null });
    try {
      const result = await action();
      setState({ busy: false, error: null, result });
      return result;
    } catch (error) {
      setState({ busy: false, error, result: null });
      return undefined;
    }
  }, []);
  const clear = useCallback(() => setState({ busy: false, error: null, result: null }), []);
  return { ...state, run, clear };
}
